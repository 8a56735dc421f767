"""``EarlyStopping``: stop training when a logged metric stops improving."""

from __future__ import annotations

import math
import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreWarning
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["EarlyStopping", "EarlyStoppingReason"]


class EarlyStoppingReason(Enum):
    """Why :class:`EarlyStopping` stopped a run (its ``stopping_reason``; Lightning's enum and values)."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Ask the Trainer to stop when ``monitor`` has not improved for ``patience`` checks.

    :param monitor: The logged metric to watch.
    :param min_delta: How much it must improve to count as an improvement.
    :param patience: How many checks without improvement to allow.
    :param mode: ``"min"`` or ``"max"``.
    :param strict: Raise if ``monitor`` was not logged (``False``: warn and skip the check).
    :param check_finite: Stop when the metric is NaN or infinite.
    :param stopping_threshold: Stop as soon as the metric is better than this.
    :param divergence_threshold: Stop as soon as the metric is worse than this.
    :param check_on_train_epoch_end: ``True``: check once per epoch, at its end (any validation of the epoch has
        run by then). ``False``: check after every validation run instead. ``None`` (default, Lightning's): chosen
        at ``setup``, at the epoch's end when validation runs once at the end of every epoch
        (``val_check_interval == 1.0`` and ``check_val_every_n_epoch == 1``), else after every validation.
    :param verbose: Print why it stops, on global rank 0.

    After a run, ``stopping_reason`` (an :class:`EarlyStoppingReason`) says why it stopped (``NOT_STOPPED`` if it
    did not) and ``stopping_reason_message`` says it in words (``None`` if it did not stop); both are saved in
    checkpoints.
    The check runs on every rank; training stops when any rank asks (the decision is reduced across
    processes), after ``min_epochs`` / ``min_steps``.
    """

    after_epoch_metrics = True

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
    ) -> None:
        if mode not in ("min", "max"):
            raise ConfigurationError(
                f"EarlyStopping(mode={mode!r}): `mode` can be min, max, got {mode}; pass mode='min' when lower is "
                f"better (a loss) or mode='max' when higher is (an accuracy)."
            )
        if not is_whole(patience, 0):
            raise ConfigurationError(f"EarlyStopping(patience={patience!r}): expected a whole number >= 0.")
        self.monitor = monitor
        self.min_delta = abs(float(min_delta))
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        # What was asked (None: Lightning's choice, made at setup from the Trainer's validation flags) and what runs.
        self._requested_check_on_train_epoch_end = check_on_train_epoch_end
        self.check_on_train_epoch_end: bool | None = check_on_train_epoch_end
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def state_key(self) -> str:
        return self._state_key_with(monitor=self.monitor, mode=self.mode)

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = float(state_dict["best_score"])
        self.patience = int(state_dict["patience"])
        # absent from checkpoints written before the reason was saved
        self.stopping_reason = EarlyStoppingReason(state_dict.get("stopping_reason", 0))
        self.stopping_reason_message = state_dict.get("stopping_reason_message")

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if self._requested_check_on_train_epoch_end is None:  # Lightning's rule for its None default
            config = trainer.config
            self.check_on_train_epoch_end = (
                config.val_check_interval == 1.0 and config.check_val_every_n_epoch == 1)

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self.check_on_train_epoch_end:
            self.check(trainer)

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        if not self.check_on_train_epoch_end and trainer.state == "fit" and not trainer.sanity_checking:
            self.check(trainer)

    def _better(self, value: float, than: float) -> bool:
        return value < than if self.mode == "min" else value > than

    def _judge(self, current: float) -> tuple[bool, EarlyStoppingReason, str | None]:
        name = self.monitor
        if self.check_finite and not math.isfinite(current):
            return True, EarlyStoppingReason.NON_FINITE_METRIC, (
                f"Monitored metric {name} = {current} is not finite; best value so far {self.best_score:.6g}. Stopping."
            )
        if self.stopping_threshold is not None and self._better(current, self.stopping_threshold):
            return True, EarlyStoppingReason.STOPPING_THRESHOLD, (
                f"Stopping threshold reached: {name} = {current:.6g} {self._order} {self.stopping_threshold}."
            )
        if self.divergence_threshold is not None and self._better(self.divergence_threshold, current):
            return True, EarlyStoppingReason.DIVERGENCE_THRESHOLD, (
                f"Divergence threshold reached: {name} = {current:.6g} {self._order} {self.divergence_threshold}."
            )
        margin = -self.min_delta if self.mode == "min" else self.min_delta
        if self._better(current, self.best_score + margin):
            self.best_score = current
            self.wait_count = 0
            return False, EarlyStoppingReason.NOT_STOPPED, None
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return True, EarlyStoppingReason.PATIENCE_EXHAUSTED, (
                f"Monitored metric {name} did not improve by more than {self.min_delta} in the last {self.wait_count} "
                f"checks; best {self.best_score:.6g}."
            )
        return False, EarlyStoppingReason.NOT_STOPPED, None

    @property
    def _order(self) -> str:
        return "<" if self.mode == "min" else ">"

    def check(self, trainer: TrainerView) -> None:
        """Judge the latest value of ``monitor`` and set ``trainer.should_stop`` when it is time."""
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            message = (
                f"EarlyStopping(monitor={self.monitor!r}) found no such metric; logged: "
                f"{sorted(trainer.callback_metrics)}. Log it with self.log({self.monitor!r}, ...)."
            )
            if self.strict:
                raise ConfigurationError(message)
            warnings.warn(message, CoreWarning, stacklevel=2)
            return
        stop, why, reason = self._judge(float(value))
        if trainer.world_size > 1:
            decision = torch.tensor(float(stop), device=trainer.lite.device)
            stop = bool(trainer.lite.all_reduce(decision, reduce_op="max") > 0)
        if stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            # with several processes another rank may have asked to stop: this rank's own reason is NOT_STOPPED then
            self.stopping_reason = why
            self.stopping_reason_message = reason
            if self.verbose and reason:
                trainer.print(f"EarlyStopping: {reason}")
