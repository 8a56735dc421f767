"""``ModelCheckpoint``: save resumable checkpoints every N epochs or steps, keep the k best, and ``last.ckpt``."""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any, Final

import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreError
from core.callbacks.checkpoint import Checkpoint

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["ModelCheckpoint"]

_MODES: Final = ("min", "max")


class ModelCheckpoint(Checkpoint):
    """Save checkpoints of the run (weights, optimizers, loop position, ...: see docs/trainer-checkpoints.md).

    :param dirpath: Where to write; by default the Trainer's ``default_checkpoint_dir``
        (``<default_root_dir>/checkpoints``; under Lightning's names ``<log_dir>/checkpoints`` with a logger).
    :param filename: A template such as ``"{epoch}-{val_loss:.2f}"``: names in braces are ``epoch``, ``step``
        and logged metrics, written as ``name=value`` unless ``auto_insert_metric_name=False``; default
        ``"{epoch}-{step}"``. ``.ckpt`` is appended; a clash with another file adds ``-v1``, ``-v2``, ...
    :param monitor: The logged metric that ranks checkpoints; ``None`` keeps the most recent ones.
    :param mode: ``"min"`` or ``"max"``: which values of ``monitor`` are better.
    :param save_top_k: How many to keep: the k best by ``monitor`` (or the k most recent... with ``monitor=None``
        only 1 or all), ``-1`` all, ``0`` none (``save_last`` still writes).
    :param save_last: Also write ``last.ckpt`` at every save.
    :param every_n_epochs: Save at the end of every N-th epoch (the default, N = 1; 0: never by epochs).
    :param every_n_train_steps: Save every N optimizer steps instead, at the end of that training batch (0: never).
    :param save_weights_only: Keep only the weights and hyperparameters (such a file cannot resume a fit).
    :param auto_insert_metric_name: Write ``{epoch}`` as ``epoch=3`` in file names.
    :param verbose: Print each save on global rank 0.
    :param save_on_exception: Also save when the run raises (the Trainer's ``on_exception``), named from the
        template as any other file.
    :param save_on_train_epoch_end: Save at the end of the training epoch (True) or after each validation
        (False). ``None`` decides as Lightning: after each validation when validation runs several times an epoch
        (``val_check_interval`` < 1) or not every epoch (``check_val_every_n_epoch`` > 1), else at the epoch end.
    :param enable_version_counter: Add ``-v1``, ``-v2``, ... to a file name that exists; ``False`` overwrites it.

    The decision (which file to write, which to delete) is made on global rank 0 and broadcast, so every
    rank keeps the same state; every rank calls the save (the strategy decides who writes), and only rank 0
    deletes files.
    """

    after_epoch_metrics = True
    FILE_EXTENSION: Final = ".ckpt"
    NAME_LAST: Final = "last"

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool | None = None,
        every_n_epochs: int | None = None,
        every_n_train_steps: int | None = None,
        save_weights_only: bool = False,
        auto_insert_metric_name: bool = True,
        verbose: bool = False,
        save_on_exception: bool = False,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        if mode not in _MODES:
            raise ConfigurationError(f"ModelCheckpoint(mode={mode!r}): expected 'min' or 'max'.")
        if not is_whole(save_top_k, -1):
            raise ConfigurationError(
                f"ModelCheckpoint(save_top_k={save_top_k!r}): expected -1, 0 or a positive number."
            )
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise ConfigurationError(
                f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): without a monitored metric there is no way "
                f"to rank checkpoints; pass monitor='val_loss' (for example), or save_top_k=1 (latest) / -1 (all)."
            )
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
            if value is not None and not is_whole(value, 0):
                raise ConfigurationError(f"ModelCheckpoint({name}={value!r}): expected a whole number >= 0.")
        if every_n_epochs and every_n_train_steps:
            raise ConfigurationError(
                "ModelCheckpoint takes every_n_epochs or every_n_train_steps, not both "
                f"(got {every_n_epochs} and {every_n_train_steps})."
            )
        self._given_dirpath = os.fspath(dirpath) if dirpath is not None else None
        self.dirpath: str | None = self._given_dirpath
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = bool(save_last)
        self.every_n_train_steps = every_n_train_steps or None  # 0: never by steps (Lightning's spelling)
        if every_n_epochs is None and every_n_train_steps is None:
            every_n_epochs = 1
        self.every_n_epochs = every_n_epochs or None  # 0: never by epochs
        self.save_on_exception = save_on_exception
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = enable_version_counter
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.best_k_models: dict[str, float] = {}
        self.best_model_path = ""
        self.kth_best_model_path = ""
        self.last_model_path = ""
        self.latest_model_path = ""  # the newest top-k file (the one replaced when monitor=None, save_top_k=1)
        self.current_score: float | None = None
        self._last_saved_step = -1

    @property
    def state_key(self) -> str:
        return self._state_key_with(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self.every_n_train_steps,
            every_n_epochs=self.every_n_epochs,
        )

    @property
    def best_model_score(self) -> torch.Tensor | None:
        best = self.best_k_models.get(self.best_model_path)
        # float64: the exact score best_k_models holds (a float32 tensor would round it).
        return None if best is None else torch.tensor(best, dtype=torch.float64)

    @property
    def kth_value(self) -> float:
        worst = self.best_k_models.get(self.kth_best_model_path)
        if worst is not None:
            return worst
        return math.inf if self.mode == "min" else -math.inf

    # -- hooks -----------------------------------------------------------------------------------------

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self.dirpath = self._given_dirpath or trainer.default_checkpoint_dir

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = self.every_n_train_steps
        step = trainer.global_step
        if every is None or step == 0 or step % every or step == self._last_saved_step or trainer.sanity_checking:
            return
        self.save(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self._saves_on_train_epoch_end(trainer):
            self._save_for_epoch(trainer)

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.state == "fit" and not trainer.sanity_checking and not self._saves_on_train_epoch_end(trainer):
            self._save_for_epoch(trainer)

    def on_exception(self, trainer: TrainerView, module: Module, exception: BaseException) -> None:
        if (self.save_on_exception and trainer.state == "fit" and not trainer.sanity_checking
                and not trainer.config.fast_dev_run and trainer.global_step != self._last_saved_step):
            self._last_saved_step = trainer.global_step
            path = self._unique_path(self._candidates(trainer), replacing="")
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
            if self.save_last:
                self._save_last(trainer)
            trainer.print(f"ModelCheckpoint: {type(exception).__name__} raised ({exception}); saved {path}")

    def _saves_on_train_epoch_end(self, trainer: TrainerView) -> bool:
        """Lightning's rule (see ``save_on_train_epoch_end``): save at the epoch end or after validation."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.config.check_val_every_n_epoch not in (1, None):
            return False
        if sum(trainer.num_val_batches) == 0:
            return True
        return bool(trainer.config.val_check_interval == 1.0)

    def _save_for_epoch(self, trainer: TrainerView) -> None:
        every = self.every_n_epochs
        if self.every_n_train_steps is not None or every is None or (trainer.current_epoch + 1) % every:
            return
        if trainer.global_step == self._last_saved_step and trainer.global_step > 0:
            return  # already saved at this step (a step-based save, or a validation of this step)
        self.save(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "kth_best_model_path": self.kth_best_model_path,
            "last_model_path": self.last_model_path,
            "latest_model_path": self.latest_model_path,
            "current_score": self.current_score,
            "last_saved_step": self._last_saved_step,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.dirpath is not None and state_dict.get("dirpath") != self.dirpath:
            # Scores of files elsewhere mean nothing here; start ranking afresh in the new directory.
            return
        self.dirpath = state_dict.get("dirpath")
        self.best_k_models = dict(state_dict["best_k_models"])
        self.best_model_path = state_dict["best_model_path"]
        self.kth_best_model_path = state_dict["kth_best_model_path"]
        self.last_model_path = state_dict["last_model_path"]
        self.latest_model_path = state_dict.get("latest_model_path", "")
        self.current_score = state_dict["current_score"]
        self._last_saved_step = state_dict.get("last_saved_step", -1)

    # -- saving ----------------------------------------------------------------------------------------

    def save(self, trainer: TrainerView) -> None:
        """Save now (on every rank): a top-k / latest file if it qualifies, and ``last.ckpt`` if asked."""
        decision = trainer.lite.broadcast(self._decide(trainer) if trainer.is_global_zero else None)
        if decision is None:
            raise CoreError("ModelCheckpoint: global rank 0 sent no decision; its save failed.")
        path, removed, state = decision
        self.load_state_dict(state)
        if path is not None:
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
            if self.verbose:
                trainer.print(f"ModelCheckpoint: saved {path}")
        for old in removed:
            trainer.remove_checkpoint(old)
        if self.save_last:
            self._save_last(trainer)
        if path is not None or self.save_last:
            for logger in trainer.loggers:  # as Lightning: loggers that upload checkpoints pick them up here
                logger.after_save_checkpoint(self)

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Write ``best_k_models`` (file -> score) as YAML, by default to ``<dirpath>/best_k_models.yaml``."""
        import yaml

        path = filepath if filepath is not None else os.path.join(self._directory(), "best_k_models.yaml")
        with open(path, "w") as file:
            yaml.dump({name: float(score) for name, score in self.best_k_models.items()}, file)

    def _save_last(self, trainer: TrainerView) -> None:
        last = os.path.join(self._directory(), self.NAME_LAST + self.FILE_EXTENSION)
        trainer.save_checkpoint(last, weights_only=self.save_weights_only)
        self.last_model_path = last

    def _directory(self) -> str:
        if self.dirpath is None:
            raise ConfigurationError("ModelCheckpoint saves only inside a Trainer run (its directory is set there).")
        return self.dirpath

    def _candidates(self, trainer: TrainerView) -> dict[str, Any]:
        metrics: dict[str, Any] = {name: float(value) for name, value in trainer.callback_metrics.items()}
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        return metrics

    def _decide(self, trainer: TrainerView) -> tuple[str | None, list[str], dict[str, Any]]:
        """On rank 0: the file to write (or None), the files to delete, and this callback's next state."""
        metrics = self._candidates(trainer)
        removed: list[str] = []
        path: str | None = None
        self._last_saved_step = trainer.global_step
        if self.monitor is None:
            if self.save_top_k != 0:
                path = self._unique_path(metrics, replacing=self.latest_model_path if self.save_top_k == 1 else "")
                if self.save_top_k == 1 and self.latest_model_path and self.latest_model_path != path:
                    removed.append(self.latest_model_path)
                self.latest_model_path = self.best_model_path = path
            return path, removed, self.state_dict()
        if self.monitor not in metrics:
            raise ConfigurationError(
                f"ModelCheckpoint(monitor={self.monitor!r}) found no such metric; logged: "
                f"{sorted(name for name in metrics if name not in ('epoch', 'step'))}. Log it with "
                f"self.log({self.monitor!r}, ...) (in validation_step for a validation metric)."
            )
        score = metrics[self.monitor]
        if math.isnan(score):
            score = math.inf if self.mode == "min" else -math.inf  # never better than a number
        self.current_score = score
        full = self.save_top_k != -1 and len(self.best_k_models) >= self.save_top_k
        if self.save_top_k == 0 or (full and not self._better(score, self.kth_value)):
            return None, removed, self.state_dict()
        replaced = self.kth_best_model_path if full else ""
        path = self._unique_path(metrics, replacing=replaced)
        if full:
            del self.best_k_models[replaced]
            if replaced != path:
                removed.append(replaced)
        self.best_k_models[path] = score
        self.latest_model_path = path
        ranked = sorted(self.best_k_models, key=self.best_k_models.__getitem__, reverse=self.mode == "max")
        self.best_model_path = ranked[0]
        self.kth_best_model_path = ranked[-1]
        return path, removed, self.state_dict()

    def _better(self, score: float, than: float) -> bool:
        return score < than if self.mode == "min" else score > than

    def format_name(self, metrics: dict[str, Any], version: int | None = None) -> str:
        """The file name (without directory) for ``metrics``, from the ``filename`` template."""
        template = self.filename or "{epoch}-{step}"
        for name in re.findall(r"\{([^{}:!]+)", template):
            if self.auto_insert_metric_name:
                template = template.replace("{" + name, f"{name}={{0[{name}]", 1)
            else:
                template = template.replace("{" + name, f"{{0[{name}]", 1)
            metrics.setdefault(name, 0)
        name = template.format(metrics)
        if version is not None:
            name += f"-v{version}"
        return name + self.FILE_EXTENSION

    def _unique_path(self, metrics: dict[str, Any], replacing: str) -> str:
        directory = self._directory()
        path = os.path.join(directory, self.format_name(dict(metrics)))
        version = 1
        while (self.enable_version_counter and os.path.exists(path) and path != replacing
               and path not in self.best_k_models):
            path = os.path.join(directory, self.format_name(dict(metrics), version))
            version += 1
        return path

    def __repr__(self) -> str:
        return (
            f"ModelCheckpoint(dirpath={self.dirpath!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
            f"save_top_k={self.save_top_k}, save_last={self.save_last})"
        )
