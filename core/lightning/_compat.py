"""Lightning's small public names that programs and tests import: exceptions, warnings, the Trainer's state enums,
``DummyLogger``, ``EarlyStoppingReason``, the ``apply_func`` and ``core.saving`` helpers, and Lightning's seeding.

Each is either core's own object under Lightning's name (``MisconfigurationException`` is
:class:`core.ConfigurationError`, so ``except MisconfigurationException`` catches what core raises for a bad
configuration) or a small class with Lightning's members. core/lightning/_tree_map.py maps the names.
"""

from __future__ import annotations

import ast
import csv
import os
from argparse import Namespace
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

import torch

from core._errors import ConfigurationError, CoreWarning
from core.callbacks.early_stopping import EarlyStoppingReason  # core's own enum, under Lightning's module path
from core.loggers import DummyExperiment, DummyLogger

__all__ = [
    "DummyExperiment",
    "DummyLogger",
    "EarlyStoppingReason",
    "ExperimentWriter",
    "MisconfigurationException",
    "PossibleUserWarning",
    "RunningStage",
    "TrainerFn",
    "TrainerState",
    "TrainerStatus",
    "convert",
    "convert_tensors_to_scalars",
    "convert_to_tensors",
    "load_hparams_from_tags_csv",
    "load_hparams_from_yaml",
    "move_data_to_device",
    "pl_worker_init_function",
    "reset_seed",
    "save_hparams_to_tags_csv",
    "save_hparams_to_yaml",
    "seed_everything",
    "update_hparams",
]

MisconfigurationException = ConfigurationError
"""Lightning's configuration error is core's: ``pytest.raises(MisconfigurationException)`` catches what core raises."""

PossibleUserWarning = CoreWarning
"""Lightning's warning about a likely mistake; core's warnings share one base, :class:`core.CoreWarning`."""


class _CaseInsensitiveEnum(str, Enum):
    """Lightning's ``LightningEnum``: a string enum equal to its value in any case (``TrainerFn.FITTING == "FIT"``)."""

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())


class TrainerStatus(_CaseInsensitiveEnum):
    """Where the Trainer is in its life: created, running an entry point, finished, or interrupted (Ctrl-C)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(_CaseInsensitiveEnum):
    """The entry point being run: ``fit``, ``validate``, ``test`` or ``predict``."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(_CaseInsensitiveEnum):
    """The loop running inside an entry point (``fit`` runs training, sanity checking and validation)."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
            return "val"
        return str(self.value)


class GradClipAlgorithmType(_CaseInsensitiveEnum):
    """How ``gradient_clip_val`` clips: ``"norm"`` (the norm of all gradients together) or ``"value"`` (each
    gradient's entries). ``Module.clip_gradients`` and the Trainer take it or its string."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        return any(member.value == val for member in GradClipAlgorithmType)

    @staticmethod
    def supported_types() -> list[str]:
        return [member.value for member in GradClipAlgorithmType]


@dataclass
class TrainerState:
    """``trainer.state`` of a Lightning Trainer: its ``status``, the entry point ``fn`` and the running ``stage``."""

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped


class ExperimentWriter:
    """``lightning.pytorch.loggers.csv_logs.ExperimentWriter``: the names of the files a ``CSVLogger`` writes in its
    ``log_dir``. Writing goes through the logger (``logger.experiment`` is the logger itself here)."""

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = os.fspath(log_dir)
        self.metrics_file_path = os.path.join(self.log_dir, self.NAME_METRICS_FILE)


# ---------------------------------------------------------------------------------------------------------------
# lightning.fabric.utilities.apply_func
# ---------------------------------------------------------------------------------------------------------------


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """``batch`` with every tensor (in dicts, lists, tuples, dataclasses' fields aside) moved to ``device``.

    An object with a ``to(device)`` method of its own (Lightning's "transferable" type) is moved by it.
    """
    from core.toolkit.tensors import apply_to_tensors

    target = torch.device(device) if not isinstance(device, torch.device) else device

    def move(tensor: torch.Tensor) -> torch.Tensor:
        non_blocking = target.type not in ("cpu", "mps")
        return tensor.to(target, non_blocking=non_blocking)

    if not isinstance(batch, (torch.Tensor, Mapping, list, tuple)) and callable(getattr(batch, "to", None)):
        moved = batch.to(target)
        return batch if moved is None else moved
    return apply_to_tensors(batch, move)


def convert_to_tensors(data: Any, device: torch.device | str | int) -> Any:
    """``data`` with every number and numpy array made a tensor on ``device``."""
    from core.toolkit.tensors import apply_to_tensors

    def as_tensor(value: Any) -> Any:
        if isinstance(value, (int, float, bool)) or type(value).__module__ == "numpy":
            return torch.as_tensor(value, device=device)
        if isinstance(value, dict):
            return type(value)({key: as_tensor(item) for key, item in value.items()})
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(as_tensor(item) for item in value)
        return value

    return apply_to_tensors(as_tensor(data), lambda tensor: tensor.to(device))


def convert_tensors_to_scalars(data: Any) -> Any:
    """``data`` with every one-element tensor replaced by its Python number.

    :raises ValueError: naming the tensor's size when a tensor has more than one element.
    """
    from core.toolkit.tensors import apply_to_tensors

    def scalar(tensor: torch.Tensor) -> Any:
        if tensor.numel() != 1:
            raise ValueError(
                f"The metric `{tensor}` does not contain a single element, thus it cannot be converted to a scalar."
            )
        return tensor.item()

    return apply_to_tensors(data, scalar)


# ---------------------------------------------------------------------------------------------------------------
# lightning.pytorch.core.saving
# ---------------------------------------------------------------------------------------------------------------


def _as_dict(hparams: Mapping[str, Any] | Namespace) -> dict[str, Any]:
    return dict(vars(hparams)) if isinstance(hparams, Namespace) else dict(hparams)


def save_hparams_to_yaml(config_yaml: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace,
                         use_omegaconf: bool = True) -> None:
    """Write ``hparams`` (a dict or an ``argparse.Namespace``) to ``config_yaml``; values YAML cannot hold are
    left out with a warning, as Lightning does."""
    import warnings

    import yaml

    directory = os.path.dirname(os.fspath(config_yaml))
    if directory and not os.path.isdir(directory):
        raise RuntimeError(f"Missing folder: {directory}.")
    plain: dict[str, Any] = {}
    for key, value in _as_dict(hparams).items():
        try:
            yaml.dump(value)
        except (TypeError, ValueError, yaml.YAMLError):
            warnings.warn(f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.",
                          CoreWarning, stacklevel=2)
            continue
        plain[key] = value
    with open(config_yaml, "w", newline="") as file:
        yaml.dump(plain, file)


def load_hparams_from_yaml(config_yaml: str | os.PathLike[str], use_omegaconf: bool = True) -> dict[str, Any]:
    """The hyperparameters in ``config_yaml``; ``{}`` with a warning when the file does not exist."""
    import warnings

    import yaml

    if not os.path.isfile(config_yaml):
        warnings.warn(f"Missing Tags: {config_yaml}.", CoreWarning, stacklevel=2)
        return {}
    with open(config_yaml) as file:
        loaded = yaml.full_load(file)
    return dict(loaded or {})


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike[str], hparams: Mapping[str, Any] | Namespace) -> None:
    """Write ``hparams`` as ``key,value`` rows (Lightning's old tags file)."""
    directory = os.path.dirname(os.fspath(tags_csv))
    if directory and not os.path.isdir(directory):
        raise RuntimeError(f"Missing folder: {directory}.")
    with open(tags_csv, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["key", "value"], delimiter=",")
        writer.writerow({"key": "key", "value": "value"})
        for key, value in _as_dict(hparams).items():
            writer.writerow({"key": key, "value": value})


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike[str]) -> dict[str, Any]:
    """The hyperparameters of a tags file written by :func:`save_hparams_to_tags_csv`."""
    import warnings

    if not os.path.isfile(tags_csv):
        warnings.warn(f"Missing Tags: {tags_csv}.", CoreWarning, stacklevel=2)
        return {}
    with open(tags_csv) as file:
        rows = list(csv.reader(file, delimiter=","))
    return {row[0]: convert(row[1]) for row in rows[1:]}


def update_hparams(hparams: dict[str, Any], updates: Mapping[str, Any]) -> None:
    """Update ``hparams`` in place with ``updates``, merging nested dicts key by key."""
    for key, value in updates.items():
        if key not in hparams:
            hparams[key] = value
        elif isinstance(value, Mapping) and isinstance(hparams[key], dict):
            update_hparams(hparams[key], value)
        else:
            hparams[key] = value


def convert(val: str) -> int | float | bool | str:
    """A string as the Python literal it spells (``"1"`` -> 1, ``"True"`` -> True), else the string."""
    try:
        value = ast.literal_eval(val)
    except (ValueError, SyntaxError):
        return val
    return value if isinstance(value, (int, float, bool, str)) else val


# ---------------------------------------------------------------------------------------------------------------
# lightning.fabric.utilities.seed
# ---------------------------------------------------------------------------------------------------------------

_PL_SEED: Final = "PL_GLOBAL_SEED"
_PL_WORKERS: Final = "PL_SEED_WORKERS"


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Lightning's ``seed_everything``: core's (:func:`core.lite.seed_everything`) with Lightning's variables.

    Without ``seed`` it reads ``PL_GLOBAL_SEED`` (then core's ``CORE_GLOBAL_SEED``), else takes 0 with a warning
    when ``verbose``; it sets ``PL_GLOBAL_SEED`` and ``PL_SEED_WORKERS`` as well as core's variables.
    """
    import warnings

    from core.lite import seed_everything as core_seed_everything
    from core.lite._seed import SEED_VARIABLE

    if seed is None:
        from_environment = os.environ.get(_PL_SEED) or os.environ.get(SEED_VARIABLE)
        if from_environment is None:
            seed = 0
            if verbose:
                warnings.warn(f"No seed found, seed set to {seed}", CoreWarning, stacklevel=2)
        else:
            try:
                seed = int(from_environment)
            except ValueError:
                raise ConfigurationError(f"Invalid seed specified via {_PL_SEED}: {from_environment!r}") from None
    elif not isinstance(seed, int):
        seed = int(seed)
    if not 0 <= seed <= 2**32 - 1:
        raise ConfigurationError(f"{seed} is not in bounds, numpy accepts from 0 to {2**32 - 1}")
    result = core_seed_everything(seed, workers=workers, verbose=verbose)
    os.environ[_PL_SEED] = str(result)
    os.environ[_PL_WORKERS] = str(int(workers))
    return result


def reset_seed() -> None:
    """Seed again with what :func:`seed_everything` set (``PL_GLOBAL_SEED``); nothing when it was not called."""
    seed = os.environ.get(_PL_SEED)
    if seed is None:
        return
    seed_everything(int(seed), workers=bool(int(os.environ.get(_PL_WORKERS, "0"))), verbose=False)


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Lightning's ``worker_init_fn``: seeds one DataLoader worker from its base seed, id and the global rank."""
    from core.lite._seed import worker_init_function

    worker_init_function(worker_id, rank if rank is not None else int(os.environ.get("RANK", 0)))
