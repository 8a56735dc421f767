"""``ModelCheckpoint``: save resumable checkpoints every N epochs, steps or minutes; keep the k best and ``last``."""

# No ``from __future__ import annotations``: ``inspect.signature(ModelCheckpoint)`` gives real types, which
# jsonargparse (core.cli, LightningCLI) needs to parse ``--save_last link`` or ``--train_time_interval``.

import math
import os
import re
import shutil
import time
import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreError, CoreWarning
from core.callbacks.checkpoint import Checkpoint

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["ModelCheckpoint"]

_MODES: Final = ("min", "max")
_LastRule = Literal["always", "if_saved"]  # save last.ckpt at every save, or only when a top-k file was written


class ModelCheckpoint(Checkpoint):
    """Save checkpoints of the run (weights, optimizers, loop position, ...: see docs/trainer-checkpoints.md).

    :param dirpath: Where to write; by default the Trainer's ``default_checkpoint_dir``
        (``<default_root_dir>/checkpoints``; under Lightning's names ``<log_dir>/checkpoints`` with a logger).
        A local path is made absolute, ``~`` expanded.
    :param filename: A template such as ``"{epoch}-{val_loss:.2f}"``: names in braces are ``epoch``, ``step``
        and logged metrics, written as ``name=value`` unless ``auto_insert_metric_name=False``; default
        ``"{epoch}-{step}"``. ``.ckpt`` is appended; a clash with another file adds ``-v1``, ``-v2``, ...
    :param monitor: The logged metric that ranks checkpoints; ``None`` keeps the most recent ones.
    :param mode: ``"min"`` or ``"max"``: which values of ``monitor`` are better.
    :param save_top_k: How many to keep: the k best by ``monitor`` (or the k most recent... with ``monitor=None``
        only 1 or all), ``-1`` all, ``0`` none.
    :param save_last: Also write ``last.ckpt`` (template :attr:`CHECKPOINT_NAME_LAST`) whenever a top-k file is
        written, and once at the end of training if none was; ``"link"``: make it a relative symbolic link to the
        newest top-k file instead of a copy (local directories only).
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
    :param train_time_interval: Save at the end of the first training batch after this much time has passed since
        the last save by time (measured on global rank 0). Only one of ``every_n_epochs``, ``every_n_train_steps``
        and ``train_time_interval`` may be set.

    A save at a step or time whose ``monitor`` is not logged yet (a validation metric) waits for the next
    validation. Files outside ``dirpath`` and the checkpoint a fit resumed from are never deleted.

    The decision (which file to write, which to delete) is made on global rank 0 and broadcast, so every
    rank keeps the same state; every rank calls the save (the strategy decides who writes), and only rank 0
    deletes files.
    """

    after_epoch_metrics = True
    FILE_EXTENSION = ".ckpt"
    CHECKPOINT_NAME_LAST = "last"  # a template, as ``filename`` ("last-{epoch}" works)
    CHECKPOINT_JOIN_CHAR: Final = "-"
    CHECKPOINT_EQUALS_CHAR: Final = "="
    STARTING_VERSION: Final = 1

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool | Literal["link"] | None = None,
        every_n_epochs: int | None = None,
        every_n_train_steps: int | None = None,
        save_weights_only: bool = False,
        auto_insert_metric_name: bool = True,
        verbose: bool = False,
        save_on_exception: bool = False,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
        train_time_interval: timedelta | None = None,
    ) -> None:
        _check_arguments(mode, save_top_k, monitor, every_n_epochs, every_n_train_steps, train_time_interval)
        if save_last not in (None, True, False, "link"):
            raise ConfigurationError(
                f"ModelCheckpoint(save_last={save_last!r}): expected True, False, None or 'link' (a symbolic link to "
                f"the newest checkpoint)."
            )
        self._given_dirpath = _absolute(dirpath) if dirpath is not None else None
        if save_last == "link" and self._given_dirpath is not None:
            _check_link_is_local(self._given_dirpath)
        self.dirpath: str | None = self._given_dirpath
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_train_steps = every_n_train_steps or None  # 0: never by steps (Lightning's spelling)
        self.train_time_interval = train_time_interval
        if every_n_epochs is None and every_n_train_steps is None and train_time_interval is None:
            every_n_epochs = 1
        self.every_n_epochs = every_n_epochs or None  # 0: never by epochs
        self.save_on_exception = save_on_exception
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = enable_version_counter
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        # The ranking, as Lightning keeps it: scores are 0-dim tensors (the logged values, NaN read as the worst).
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.kth_best_model_path = ""
        self.kth_value = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.current_score: torch.Tensor | None = None  # the score of the newest top-k file
        self.last_model_path = ""
        self.latest_model_path = ""  # the newest top-k file (the one replaced when monitor=None, save_top_k=1)
        self._last_saved_step = -1  # the global step of the newest file written (-1: none)
        self._last_checkpoint_saved = ""  # the newest file written (what save_last="link" points to)
        self._deferred_to_validation = False
        self._last_time_checked: float | None = None

    @property
    def state_key(self) -> str:
        # Lightning's key, so that checkpoints of either read in the other
        return self._state_key_with(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self.every_n_train_steps or 0,
            every_n_epochs=self.every_n_epochs or 0,
            train_time_interval=self.train_time_interval,
        )

    # -- hooks -----------------------------------------------------------------------------------------

    def setup(self, trainer: "TrainerView", module: "Module", stage: str) -> None:
        self.dirpath = self._given_dirpath or trainer.default_checkpoint_dir
        if self.save_last == "link":
            _check_link_is_local(self.dirpath)

    def on_train_start(self, trainer: "TrainerView", module: "Module") -> None:
        self._last_time_checked = time.monotonic()

    def on_train_batch_end(
        self, trainer: "TrainerView", module: "Module", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = self.every_n_train_steps
        step_due = every is not None and trainer.global_step % every == 0
        now = time.monotonic()
        time_due = self._time_due(trainer, now)
        if not (step_due or time_due):
            return
        if time_due:
            self._last_time_checked = now
        if self.monitor is not None and self.monitor not in self._candidates(trainer):
            self._deferred_to_validation = True  # a validation metric: save when validation has logged it
            return
        if not self._skips(trainer):
            self._save(trainer, topk=True, last="always")

    def on_train_epoch_end(self, trainer: "TrainerView", module: "Module") -> None:
        if not self._skips(trainer) and self._saves_on_train_epoch_end(trainer):
            self._save(trainer, topk=self._epoch_due(trainer), last="if_saved")

    def on_validation_end(self, trainer: "TrainerView", module: "Module") -> None:
        if self._skips(trainer) or self._saves_on_train_epoch_end(trainer):
            return
        if self._deferred_to_validation:
            self._deferred_to_validation = False
            self._save(trainer, topk=True, last="always")
        else:
            self._save(trainer, topk=self._epoch_due(trainer), last="if_saved")

    def on_train_end(self, trainer: "TrainerView", module: "Module") -> None:
        # save_last promises a last checkpoint: write it now if no save wrote one (save_top_k=0, no validation, ...)
        if self.save_last and not self._last_checkpoint_saved and not trainer.config.fast_dev_run:
            self._save(trainer, topk=False, last="always")

    def on_exception(self, trainer: "TrainerView", module: "Module", exception: BaseException) -> None:
        if (self.save_on_exception and trainer.state == "fit" and not trainer.sanity_checking
                and not trainer.config.fast_dev_run and trainer.global_step != self._last_saved_step):
            self._last_saved_step = trainer.global_step
            path = self._unique_path(self._candidates(trainer), replacing="")
            trainer.save_checkpoint(path, self.save_weights_only)
            self._last_checkpoint_saved = path
            if self.save_last:
                self._save(trainer, topk=False, last="always")
            trainer.print(f"ModelCheckpoint: {type(exception).__name__} raised ({exception}); saved {path}")

    def _skips(self, trainer: "TrainerView") -> bool:
        """Lightning's rule: no saves under fast_dev_run, outside fit, in the sanity check, before the first step
        or twice at one step (``on_exception`` saves at step 0 too: the run's state when it failed)."""
        return (bool(trainer.config.fast_dev_run) or trainer.state != "fit" or trainer.sanity_checking
                or trainer.global_step in (0, self._last_saved_step))

    def _epoch_due(self, trainer: "TrainerView") -> bool:
        every = self.every_n_epochs
        return every is not None and (trainer.current_epoch + 1) % every == 0

    def _time_due(self, trainer: "TrainerView", now: float) -> bool:
        if self.train_time_interval is None or self._last_time_checked is None:
            return False
        due = now - self._last_time_checked >= self.train_time_interval.total_seconds()
        # clocks differ across processes: rank 0 decides, so that every rank saves (a collective) or none does
        return bool(trainer.lite.broadcast(due)) if trainer.world_size > 1 else due

    def _saves_on_train_epoch_end(self, trainer: "TrainerView") -> bool:
        """Lightning's rule (see ``save_on_train_epoch_end``): save at the epoch end or after validation."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.config.check_val_every_n_epoch not in (1, None):
            return False
        if sum(trainer.num_val_batches) == 0:
            return True
        return bool(trainer.config.val_check_interval == 1.0)

    # -- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return self._state()

    def _state(self) -> dict[str, Any]:
        # state_dict's content; the broadcast below uses it directly, so that a subclass's state_dict runs only when
        # a checkpoint is written (Lightning's tests count its calls)
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "latest_model_path": self.latest_model_path,
            "last_saved_step": self._last_saved_step,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the ranking of a checkpoint written in the same ``dirpath``; from another, only ``best_model_path``.

        Scores of files elsewhere mean nothing here (and those files are never deleted from here), so ranking
        starts afresh in the new directory, with a warning.
        """
        saved_dirpath = state_dict.get("dirpath", self.dirpath)
        if self.dirpath is None:
            self.dirpath = saved_dirpath  # not set up yet: adopt the checkpoint's directory
        if saved_dirpath == self.dirpath:
            self.best_model_score = state_dict.get("best_model_score")
            self.best_k_models = dict(state_dict.get("best_k_models", self.best_k_models))
            self.kth_best_model_path = state_dict.get("kth_best_model_path", self.kth_best_model_path)
            self.kth_value = state_dict.get("kth_value", self.kth_value)
            self.last_model_path = state_dict.get("last_model_path", self.last_model_path)
            self.latest_model_path = state_dict.get("latest_model_path", "")
            self.current_score = state_dict.get("current_score")
            self._last_saved_step = state_dict.get("last_saved_step", -1)
        else:
            warnings.warn(
                f"The dirpath has changed from {saved_dirpath!r} to {self.dirpath!r}, therefore `best_model_score`, "
                f"`kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` won't be reloaded. Only "
                f"`best_model_path` will be reloaded; the files in {saved_dirpath!r} are left alone.",
                CoreWarning,
                stacklevel=2,
            )
        self.best_model_path = state_dict["best_model_path"]

    def _sync_state(self) -> dict[str, Any]:
        """Everything :meth:`_decide` changes: rank 0 sends it to the others with the decision.

        Scores travel as plain numbers (:func:`_number`): a tensor in a broadcast object is pickled with one
        ``torch.save`` per tensor, which Lightning's tests count as checkpoint writes.
        """
        state = {**self._state(), "last_checkpoint_saved": self._last_checkpoint_saved}
        for key in ("best_model_score", "current_score", "kth_value"):
            state[key] = _number(state[key])
        state["best_k_models"] = {path: _number(score) for path, score in state["best_k_models"].items()}
        return state

    def _apply_sync_state(self, state: dict[str, Any]) -> None:
        self.best_model_score = _tensor(state["best_model_score"])
        self.best_model_path = state["best_model_path"]
        self.current_score = _tensor(state["current_score"])
        self.best_k_models = {path: _tensor(score) for path, score in state["best_k_models"].items()}
        self.kth_best_model_path = state["kth_best_model_path"]
        self.kth_value = _tensor(state["kth_value"])
        self.last_model_path = state["last_model_path"]
        self.latest_model_path = state["latest_model_path"]
        self._last_saved_step = state["last_saved_step"]
        self._last_checkpoint_saved = state["last_checkpoint_saved"]

    # -- saving ----------------------------------------------------------------------------------------

    def save(self, trainer: "TrainerView") -> None:
        """Save now (on every rank): a top-k / latest file if it qualifies, and ``last.ckpt`` if asked."""
        self._save(trainer, topk=True, last="always")

    def _save(self, trainer: "TrainerView", *, topk: bool, last: _LastRule) -> None:
        decision = trainer.lite.broadcast(self._decide(trainer, topk, last) if trainer.is_global_zero else None)
        if decision is None:
            raise CoreError("ModelCheckpoint: global rank 0 sent no decision; its save failed.")
        path, last_path, link_to, removed, state = decision
        self._apply_sync_state(state)
        if path is not None:
            trainer.save_checkpoint(path, self.save_weights_only)
            if self.verbose:
                trainer.print(f"ModelCheckpoint: saved {path}")
        if last_path is not None:
            if link_to is not None:
                self._link_checkpoint(trainer, link_to, last_path)
            else:
                trainer.save_checkpoint(last_path, self.save_weights_only)
        for old in removed:
            trainer.remove_checkpoint(old)
        if path is not None or last_path is not None:
            for logger in trainer.loggers:  # as Lightning: loggers that upload checkpoints pick them up here
                logger.after_save_checkpoint(self)

    @staticmethod
    def _link_checkpoint(trainer: "TrainerView", filepath: str, linkpath: str) -> None:
        """Make ``linkpath`` a relative symbolic link to ``filepath`` on global rank 0 (a copy where links fail)."""
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            if os.path.islink(linkpath) or os.path.isfile(linkpath):
                os.remove(linkpath)
            elif os.path.isdir(linkpath):
                shutil.rmtree(linkpath)
            try:
                os.symlink(os.path.relpath(filepath, os.path.dirname(linkpath)), linkpath)
            except OSError:  # Windows without the privilege to make links
                shutil.copy(filepath, linkpath)
        trainer.lite.barrier()

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Write ``best_k_models`` (file -> score) as YAML, by default to ``<dirpath>/best_k_models.yaml``."""
        import yaml

        path = filepath if filepath is not None else os.path.join(self._directory(), "best_k_models.yaml")
        with open(path, "w") as file:
            yaml.dump({name: float(score) for name, score in self.best_k_models.items()}, file)

    def _directory(self) -> str:
        if self.dirpath is None:
            raise ConfigurationError("ModelCheckpoint saves only inside a Trainer run (its directory is set there).")
        return self.dirpath

    def _candidates(self, trainer: "TrainerView") -> dict[str, Any]:
        """The values file names and scores come from: the logged metrics, ``epoch`` and ``step`` (as Lightning)."""
        metrics: dict[str, Any] = {name: _scalar(value) for name, value in trainer.callback_metrics.items()}
        epoch, step = metrics.get("epoch"), metrics.get("step")
        metrics["epoch"] = epoch.int() if isinstance(epoch, torch.Tensor) else torch.tensor(trainer.current_epoch)
        metrics["step"] = step.int() if isinstance(step, torch.Tensor) else torch.tensor(trainer.global_step)
        return metrics

    def _decide(
        self, trainer: "TrainerView", topk: bool, last: _LastRule
    ) -> tuple[str | None, str | None, str | None, list[str], dict[str, Any]]:
        """On rank 0: the top-k file to write (or None), the last file (or None) and what it links to (or None),
        the files to delete, and this callback's next state."""
        metrics = self._candidates(trainer)
        removed: list[str] = []
        path: str | None = None
        if topk and self.save_top_k != 0:
            path, replaced = self._next_latest(metrics) if self.monitor is None else self._next_best(trainer, metrics)
            if path is not None:
                self._last_saved_step = trainer.global_step
                self._last_checkpoint_saved = self.latest_model_path = path
                if replaced and self._removable(trainer, replaced, path):
                    removed.append(replaced)
        last_path = link_to = None
        saved_now = self._last_saved_step == trainer.global_step
        if self.save_last and (last == "always" or saved_now or (self.save_last == "link"
                                                                and self._last_checkpoint_saved)):
            last_path = self._unique_path(metrics, replacing=self.last_model_path, template=self.CHECKPOINT_NAME_LAST)
            previous, self.last_model_path = self.last_model_path, last_path
            if self.save_last == "link" and self._last_checkpoint_saved and self.save_top_k != 0:
                link_to = self._last_checkpoint_saved
            else:
                self._last_saved_step = trainer.global_step
                self._last_checkpoint_saved = last_path
            if previous and self._removable(trainer, previous, last_path):
                removed.append(previous)
        return path, last_path, link_to, removed, self._sync_state()

    def _next_latest(self, metrics: dict[str, Any]) -> tuple[str, str]:
        """``monitor=None``: the newest file, replacing the previous one when ``save_top_k=1``."""
        path = self._unique_path(metrics, replacing=self.best_model_path)
        previous, self.best_model_path = self.best_model_path, path
        return path, previous if self.save_top_k == 1 else ""

    def _next_best(self, trainer: "TrainerView", metrics: dict[str, Any]) -> tuple[str | None, str]:
        """The file of a score among the k best (or None), and the file it pushes out of them."""
        assert self.monitor is not None
        if self.monitor not in metrics:
            raise ConfigurationError(
                f"`ModelCheckpoint(monitor={self.monitor!r})` could not find the monitored key in the returned "
                f"metrics; logged: {sorted(name for name in metrics if name not in ('epoch', 'step'))}. HINT: Did you "
                f"call `log({self.monitor!r}, value)` in the `LightningModule`? (In validation_step for a validation "
                f"metric.)"
            )
        current = metrics[self.monitor].detach().cpu()
        if torch.isnan(current):
            current = torch.tensor(math.inf if self.mode == "min" else -math.inf)  # never better than a number
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        if len(self.best_k_models) >= k and not self._better(float(current), float(self._kth_score())):
            if self.verbose:
                trainer.print(f"ModelCheckpoint: {self.monitor!r} = {float(current):.5g} was not in top {k}")
            return None, ""
        replaced = ""
        if len(self.best_k_models) == k:
            replaced = self.kth_best_model_path
            self.best_k_models.pop(replaced)
        path = self._unique_path(metrics, replacing=replaced)
        self.current_score = current
        self.best_k_models[path] = current
        ranked = sorted(self.best_k_models, key=lambda name: float(self.best_k_models[name]),
                        reverse=self.mode == "max")
        if len(self.best_k_models) == k:
            self.kth_best_model_path = ranked[-1]
            self.kth_value = self.best_k_models[ranked[-1]]
        self.best_model_path = ranked[0]
        self.best_model_score = self.best_k_models[ranked[0]]
        return path, replaced

    def _kth_score(self) -> torch.Tensor:
        """The score a new checkpoint must beat once ``save_top_k`` files are kept (the worst of them)."""
        return self.best_k_models.get(self.kth_best_model_path, self.kth_value)

    def _better(self, score: float, than: float) -> bool:
        return score < than if self.mode == "min" else score > than

    def _removable(self, trainer: "TrainerView", previous: str, current: str) -> bool:
        """Lightning's rule: never delete the file just written, one outside ``dirpath``, or the one resumed from."""
        if previous == current:
            return False
        if "://" in previous:
            return True
        resumed = getattr(getattr(trainer, "run_state", None), "ckpt_path", None)
        if resumed is not None and os.path.abspath(previous) == os.path.abspath(resumed):
            return False
        return os.path.commonpath([os.path.abspath(previous), os.path.abspath(self._directory())]) == (
            os.path.abspath(self._directory())
        )

    def format_name(self, metrics: dict[str, Any], version: int | None = None, template: str | None = None) -> str:
        """The file name (without directory) for ``metrics``, from ``template`` (by default the ``filename`` one)."""
        template = template or self.filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}"
        for name in re.findall(r"\{([^{}:!]+)", template):
            if self.auto_insert_metric_name:
                template = template.replace("{" + name, f"{name}{self.CHECKPOINT_EQUALS_CHAR}{{0[{name}]", 1)
            else:
                template = template.replace("{" + name, f"{{0[{name}]", 1)
            metrics.setdefault(name, torch.tensor(0))
        name = template.format(metrics)
        if version is not None:
            name += f"{self.CHECKPOINT_JOIN_CHAR}v{version}"
        return name + self.FILE_EXTENSION

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None
    ) -> str:
        """Lightning's name for :meth:`format_name`: the path in ``dirpath`` (the bare name before ``setup``)."""
        name = self.format_name(dict(metrics), ver, filename)
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _unique_path(self, metrics: dict[str, Any], replacing: str, template: str | None = None) -> str:
        directory = self._directory()
        path = os.path.join(directory, self.format_name(dict(metrics), template=template))
        version = self.STARTING_VERSION
        while self.enable_version_counter and os.path.exists(path) and path != replacing:
            path = os.path.join(directory, self.format_name(dict(metrics), version, template))
            version += 1
        return path

    def __repr__(self) -> str:
        return (
            f"ModelCheckpoint(dirpath={self.dirpath!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
            f"save_top_k={self.save_top_k}, save_last={self.save_last!r})"
        )


def _check_arguments(
    mode: str,
    save_top_k: int,
    monitor: str | None,
    every_n_epochs: int | None,
    every_n_train_steps: int | None,
    train_time_interval: timedelta | None,
) -> None:
    """Refuse a configuration that cannot work, in Lightning's words plus the fix."""
    if mode not in _MODES:
        raise ConfigurationError(
            f"ModelCheckpoint(mode={mode!r}): `mode` can be min, max but got {mode}; pass mode='min' when lower is "
            f"better (a loss) or mode='max' when higher is (an accuracy)."
        )
    if not is_whole(save_top_k, -1):
        raise ConfigurationError(
            f"ModelCheckpoint: Invalid value for save_top_k={save_top_k!r}. Must be >= -1 (-1: keep all, 0: none, "
            f"k: the k best)."
        )
    for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
        if value is not None and not is_whole(value, 0):
            raise ConfigurationError(
                f"ModelCheckpoint: Invalid value for {name}={value!r}. Must be >= 0 (a whole number; 0: never)."
            )
    if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
        raise ConfigurationError(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}): expected a datetime.timedelta, such as "
            f"timedelta(minutes=30)."
        )
    triggers = [bool(every_n_train_steps), bool(every_n_epochs), train_time_interval is not None]
    if sum(triggers) > 1:
        raise ConfigurationError(
            f"ModelCheckpoint: Combination of parameters every_n_train_steps={every_n_train_steps or 0}, "
            f"every_n_epochs={every_n_epochs or 0} and train_time_interval={train_time_interval} should be mutually "
            f"exclusive: set one of them, not both (for two schedules, use two ModelCheckpoint callbacks)."
        )
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise ConfigurationError(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration: without a "
            f"monitored metric there is no way to rank checkpoints (no quantity for top_k to track); pass "
            f"monitor='val_loss' (for example), or save_top_k=1 (latest) / -1 (all)."
        )


def _absolute(dirpath: str | os.PathLike[str]) -> str:
    """A local directory made absolute with ``~`` expanded (as Lightning); a URL (``s3://...``) as given."""
    path = os.fspath(dirpath)
    return path if "://" in path else os.path.realpath(os.path.expanduser(path))


def _check_link_is_local(dirpath: str) -> None:
    if "://" in dirpath and not dirpath.startswith("file://"):
        raise ConfigurationError(
            f"`ModelCheckpoint(save_last='link')` is only supported for local file paths, got `dirpath={dirpath}`: "
            f"symbolic links exist only on a local filesystem; use save_last=True (a copy) there."
        )


def _scalar(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else torch.tensor(value)


def _number(score: Any) -> Any:
    """A 0-dim tensor score as ``(value, dtype name)``, cheap to broadcast; anything else as it is."""
    if isinstance(score, torch.Tensor):
        return (score.item(), str(score.dtype).removeprefix("torch."))
    return score


def _tensor(score: Any) -> Any:
    """The inverse of :func:`_number` (on CPU, where the callback keeps its scores)."""
    if isinstance(score, tuple):
        value, dtype = score
        return torch.tensor(value, dtype=getattr(torch, dtype))
    return score
