"""The Trainer's checkpoint: one function builds it, one restores it (see docs/trainer-checkpoints.md).

A checkpoint holds everything a run needs to continue as if it had never stopped: the module's weights,
every optimizer and scheduler, the precision's state (added by ``Lite.save``), the loop position, the
epoch accumulation of logged metrics, the random number generators of every rank, the state of each
callback and of the DataModule. Everything in it is tensors and plain containers, so it loads with
``weights_only=True``.

Only ``Lite.save`` / ``Lite.load`` touch storage: the strategy decides which ranks write and read, the
checkpoint_io how bytes reach the disk.
"""

from __future__ import annotations

import glob
import os
import random
import re
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import torch

from core._errors import CheckpointError, ConfigurationError, CoreWarning
from core.module import StatefulList
from core.trainer._samples import SamplePosition
from core.trainer._state import FitProgress

if TYPE_CHECKING:
    from core.lite import Lite
    from core.trainer._view import LoopView as Trainer  # the protocol: the Trainer's class imports this module

FORMAT: Final = "core.trainer/1"
"""The ``format`` entry of a Trainer checkpoint; a loader refuses what it does not know."""

CHECKPOINT_SUFFIX: Final = ".ckpt"


# -------------------------------------------------------------------------------------------------
# Random number generators, packed into fixed-size tensors so that every rank's can be gathered
# -------------------------------------------------------------------------------------------------


def _numpy_random() -> Any:
    try:
        import numpy
    except ImportError:  # numpy is optional
        return None
    return numpy.random


def snapshot_rng() -> dict[str, Any]:
    """This process's generator states as they are: torch (CPU and initialised CUDA devices), ``random``, numpy.

    Cheap enough for every epoch start; :func:`pack_rng` turns them into tensors only when a checkpoint is saved.
    """
    numpy_random = _numpy_random()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": numpy_random.get_state() if numpy_random is not None else None,
        "cuda": torch.cuda.get_rng_state_all() if cuda else None,
    }


def pack_rng(captured: dict[str, Any]) -> dict[str, torch.Tensor]:
    """:func:`snapshot_rng`'s states as fixed-size tensors, the same shapes on every rank (to gather and save)."""
    version, internal, gauss = captured["python"]
    python = [float(version), *map(float, internal), float(gauss is not None), float(gauss or 0.0)]
    packed = {"torch": captured["torch"], "python": torch.tensor(python, dtype=torch.float64)}
    if captured["numpy"] is not None:
        _, keys, position, has_gauss, cached = captured["numpy"]
        numbers = [*map(float, keys), float(position), float(has_gauss), float(cached)]
        packed["numpy"] = torch.tensor(numbers, dtype=torch.float64)
    if captured["cuda"] is not None:
        packed["cuda"] = torch.stack(captured["cuda"])
    return packed


def capture_rng() -> dict[str, torch.Tensor]:
    """This process's generator states, packed: ``pack_rng(snapshot_rng())``."""
    return pack_rng(snapshot_rng())


def restore_rng(state: dict[str, torch.Tensor]) -> None:
    """Set this process's generators from :func:`pack_rng`'s result (one rank's row of a checkpoint)."""
    torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
    python = [int(value) for value in state["python"][:-2].tolist()]
    has_gauss, gauss = state["python"][-2:].tolist()
    random.setstate((python[0], tuple(python[1:]), gauss if has_gauss else None))
    numpy_random = _numpy_random()
    if numpy_random is not None and "numpy" in state:
        import numpy

        numbers = state["numpy"].tolist()
        keys = numpy.array(numbers[:-3], dtype=numpy.uint32)
        numpy_random.set_state(("MT19937", keys, int(numbers[-3]), int(numbers[-2]), numbers[-1]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"].to("cpu", torch.uint8)))


def gather_rng(lite: Lite, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every rank's generator states, stacked by global rank (one all_gather per generator)."""
    gathered = {}
    for name in sorted(state):
        gathered[name] = lite.all_gather(state[name].to(lite.device)).cpu()
    return gathered


def rng_of_rank(saved: dict[str, torch.Tensor], global_rank: int) -> dict[str, torch.Tensor] | None:
    """The generator states of ``global_rank`` in a gathered record, ``None`` when that rank was not saved."""
    if global_rank >= saved["torch"].shape[0]:
        return None
    # A copy, not a view: torch.set_rng_state reads a rank > 0's row of the stack from its storage's start.
    return {name: stacked[global_rank].clone() for name, stacked in saved.items()}


# -------------------------------------------------------------------------------------------------
# The state of a whole run
# -------------------------------------------------------------------------------------------------


def plain_hyperparameters(hparams: dict[str, Any]) -> dict[str, Any]:
    """Hyperparameters that load with ``weights_only=True``: anything else is kept as its ``repr``."""

    def plain(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            return {key: plain(item) for key, item in value.items()}
        return repr(value)

    return {str(name): plain(value) for name, value in hparams.items()}


def checkpoint_state(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to resume the current run of ``trainer``, for ``Lite.save``.

    Must be called on every rank at the same point (it gathers every rank's generator states). Modules,
    optimizers and schedulers appear as objects; ``Lite.save`` turns them into state dicts and adds the
    precision's state. ``weights_only`` keeps the weights and hyperparameters only.
    """
    module = trainer.attached_module()
    progress, sample_position = _position(trainer)
    state: dict[str, Any] = {
        "format": FORMAT,
        "state_dict": module,
        "hyper_parameters": plain_hyperparameters(dict(module.hparams)),
        "epoch": progress.epoch,
        "global_step": trainer.global_step,
    }
    if weights_only:
        return state
    state.update(
        {
            "optimizer_states": StatefulList(trainer.optimizers, "optimizers"),
            "lr_schedulers": StatefulList([config.scheduler for config in trainer.lr_scheduler_configs], "schedulers"),
            "loops": progress.as_dict(),
            "sample_position": sample_position,
            # The epoch's accumulated metrics matter only when the epoch is not finished.
            "results": {} if progress.epoch_finished else trainer.run_state.train_metrics.state_dict(),
            "rng": gather_rng(trainer.lite, capture_rng()),
            "rng_epoch_start": gather_rng(trainer.lite, pack_rng(trainer.run_state.epoch_start_rng or snapshot_rng())),
            "callbacks": {
                callback.state_key: saved for callback in trainer.callbacks if (saved := callback.state_dict())
            },
        }
    )
    if trainer.datamodule is not None:
        state["datamodule"] = trainer.datamodule.state_dict()
    return state


def sample_position(trainer: Trainer) -> dict[str, Any] | None:
    """The epoch's position in samples of its order (plain values), ``None`` when the order is not known."""
    samples, progress = trainer.run_state.epoch_samples, trainer.run_state.progress
    if samples is None or samples.order.epoch != progress.epoch:
        return None
    return samples.position(progress.batches_done).as_dict()


def _position(trainer: Trainer) -> tuple[FitProgress, dict[str, Any] | None]:
    """Where a checkpoint resumes: the loop's progress and sample position, or, after a fit stopped in the middle
    of an epoch (the loop has closed that epoch since, as Lightning does), where it stopped: the epoch goes on
    from there rather than a new one starting with samples of the stopped one never trained."""
    stopped = trainer.run_state.stopped_at
    if stopped is not None:
        return stopped
    return trainer.run_state.progress, sample_position(trainer)


def saved_checkpoint_state(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    """:func:`checkpoint_state` after the Module's and the callbacks' ``on_save_checkpoint``: what every save writes.

    ``Trainer.save_checkpoint`` and the FaultTolerance callback both save this, so that what a Module adds in
    ``on_save_checkpoint`` is there when a resume calls its ``on_load_checkpoint``. Collective, like
    :func:`checkpoint_state`.
    """
    module = trainer.attached_module()
    state = checkpoint_state(trainer, weights_only=weights_only)
    module.on_save_checkpoint(state)
    for callback in trainer.callbacks:
        callback.on_save_checkpoint(trainer, module, state)
    return state


def restore_checkpoint_state(trainer: Trainer, path: str, weights_only: bool = False) -> dict[str, Any]:
    """Restore from ``path`` everything :func:`checkpoint_state` saved, on every rank.

    Weights, optimizers, schedulers and the precision are loaded in place (through ``Lite.load``);
    callbacks, the DataModule, the loop position and the epoch's metrics are set; the generator states
    are kept in ``trainer.run_state.resume_rng`` for the fit loop to apply just before it draws its next batches.
    ``weights_only`` loads the weights only (``validate`` / ``test`` / ``predict``, or fine-tuning).

    :return: The remaining entries of the checkpoint (your own, from ``on_save_checkpoint``).
    """
    module = trainer.attached_module()
    targets: dict[str, Any] = {"state_dict": module}
    if not weights_only:
        targets["optimizer_states"] = StatefulList(trainer.optimizers, "optimizers")
        targets["lr_schedulers"] = StatefulList(
            [config.scheduler for config in trainer.lr_scheduler_configs], "schedulers"
        )
    try:
        rest = trainer.lite.load(path, targets)
    except CheckpointError as error:
        if weights_only or "has no entry for" not in str(error):
            raise
        raise CheckpointError(
            f"{error} It was saved with weights only (save_weights_only=True), so training cannot resume from "
            f"it; load the weights with trainer.validate / test, or start fit() without ckpt_path."
        ) from None
    found = rest.get("format")
    if found != FORMAT:
        raise CheckpointError(f"{path!r} is not a Trainer checkpoint of format {FORMAT!r} (its format: {found!r}).")
    module.on_load_checkpoint(rest)
    for callback in trainer.callbacks:
        callback.on_load_checkpoint(trainer, module, rest)
    if weights_only:
        return rest
    saved_callbacks = rest.get("callbacks", {})
    missing = sorted(set(saved_callbacks) - {callback.state_key for callback in trainer.callbacks})
    if missing:
        warnings.warn(
            "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
            f"`Trainer` instantiation. Please add the following callbacks: {missing}. {path!r} holds their state, "
            "which nothing here restores.", CoreWarning, stacklevel=3,
        )
    for callback in trainer.callbacks:
        if callback.state_key in saved_callbacks:
            callback.load_state_dict(saved_callbacks[callback.state_key])
    if trainer.datamodule is not None and "datamodule" in rest:
        trainer.datamodule.load_state_dict(rest["datamodule"])
    trainer.run_state.progress = FitProgress.from_dict(rest["loops"])
    if trainer.max_epochs != -1 and trainer.current_epoch > trainer.max_epochs:  # as Lightning: nothing left to train
        raise ConfigurationError(
            f"You restored a checkpoint with current_epoch={trainer.current_epoch}, but you have set "
            f"Trainer(max_epochs={trainer.max_epochs}): the fit would have nothing to train. Raise max_epochs above "
            f"{trainer.current_epoch} to train on, or load the weights with validate/test instead."
        )
    trainer.run_state.stopped_at = None
    trainer.run_state.train_metrics.load_state_dict(rest.get("results", {}))
    trainer.run_state.resume_rng = (
        rng_of_rank(rest["rng"], trainer.global_rank),
        rng_of_rank(rest["rng_epoch_start"], trainer.global_rank),
    )
    saved_world_size = int(rest["rng"]["torch"].shape[0])  # one row of generator states per rank
    trainer.run_state.resume_samples = (SamplePosition.from_dict(rest.get("sample_position")), saved_world_size)
    return rest


# -------------------------------------------------------------------------------------------------
# ckpt_path="last" / "best"
# -------------------------------------------------------------------------------------------------


def _step_in_name(path: str) -> int:
    found = re.search(r"step=(\d+)", os.path.basename(path))
    return int(found.group(1)) if found else -1


def _newest(paths: Sequence[str]) -> str | None:
    # A checkpoint is a file, or a directory of shards (sharded strategies); equal times: the higher step wins.
    existing = [path for path in paths if os.path.exists(path)]
    if not existing:
        return None
    return max(existing, key=lambda path: (os.stat(path).st_mtime_ns, _step_in_name(path), path))


def find_last(directories: Sequence[str], known: Sequence[str]) -> str | None:
    """The most recently written checkpoint among ``known`` paths and the ``*.ckpt`` files of ``directories``."""
    candidates = list(known)
    for directory in directories:
        candidates.extend(glob.glob(os.path.join(glob.escape(directory), f"*{CHECKPOINT_SUFFIX}")))
    return _newest(candidates)


# Lightning's SLURM auto-requeue checkpoints: <default_root_dir>/hpc_ckpt_<n>.ckpt, n counting up from 1.
HPC_CHECKPOINT_PREFIX: Final = "hpc_ckpt_"


def hpc_checkpoint_numbers(directory: str) -> list[int]:
    """The ``n`` of every ``hpc_ckpt_<n>.ckpt`` in ``directory`` (local), ascending; ``[]`` for none."""
    numbers = []
    for path in glob.glob(os.path.join(glob.escape(directory), f"{HPC_CHECKPOINT_PREFIX}*{CHECKPOINT_SUFFIX}")):
        found = re.fullmatch(rf"{HPC_CHECKPOINT_PREFIX}(\d+){re.escape(CHECKPOINT_SUFFIX)}", os.path.basename(path))
        if found:
            numbers.append(int(found.group(1)))
    return sorted(numbers)


def _hpc_path(directory: str, number: int) -> str:
    return os.path.join(directory, f"{HPC_CHECKPOINT_PREFIX}{number}{CHECKPOINT_SUFFIX}")


def hpc_resume_path(directory: str) -> str | None:
    """The newest ``hpc_ckpt_<n>.ckpt`` of ``directory`` (the highest ``n``), or ``None``."""
    numbers = hpc_checkpoint_numbers(directory)
    return _hpc_path(directory, numbers[-1]) if numbers else None


def hpc_save_path(directory: str) -> str:
    """Where the next requeue checkpoint goes: ``hpc_ckpt_<highest n + 1>.ckpt`` (``hpc_ckpt_1.ckpt`` first)."""
    numbers = hpc_checkpoint_numbers(directory)
    return _hpc_path(directory, (numbers[-1] if numbers else 0) + 1)


class CheckpointNotFoundError(ConfigurationError, FileNotFoundError):
    """``ckpt_path`` names no file: a :class:`core.ConfigurationError` that is also the ``FileNotFoundError``
    Lightning raises there."""


def check_ckpt_path(ckpt_path: object) -> None:
    if ckpt_path is not None and not isinstance(ckpt_path, (str, os.PathLike)):
        raise ConfigurationError(f"ckpt_path={ckpt_path!r}: expected a path, 'last', 'best', 'hpc' or None.")
