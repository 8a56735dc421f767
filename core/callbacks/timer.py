"""``Timer``: measure each stage, and stop training once a time budget is used (``Trainer(max_time=...)``)."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

_STAGES = ("train", "validate", "test", "predict")


def as_duration(value: object) -> timedelta | None:
    """``"DD:HH:MM:SS"``, a ``timedelta`` or a dict of ``timedelta`` arguments, as Lightning accepts them."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", value.strip())
        if match:
            days, hours, minutes, seconds = (int(part) for part in match.groups())
            return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if isinstance(value, dict):
        try:
            return timedelta(**value)
        except TypeError as error:
            raise ConfigurationError(f"duration={value!r}: not timedelta arguments ({error}).") from None
    raise ConfigurationError(
        f"duration={value!r}: expected 'DD:HH:MM:SS' (like '00:12:00:00'), a datetime.timedelta, or a dict such as "
        f"{{'hours': 12}}."
    )


class Timer(Callback):
    """Time the train/validate/test/predict stages; with ``duration``, stop training when it is used up.

    :param duration: The training time budget; checked after each training batch, so training stops at a
        step boundary (and the usual end-of-training callbacks, checkpoints included, still run).
    :param interval: ``"step"`` (default) or ``"epoch"``: when the budget is checked.
    """

    def __init__(self, duration: object = None, interval: str = "step", verbose: bool = True) -> None:
        if interval not in ("step", "epoch"):
            raise ConfigurationError(f"Timer(interval={interval!r}): expected 'step' or 'epoch'.")
        self.duration = as_duration(duration)
        self.interval = interval
        self.verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset = 0.0  # training time of a run this one resumed

    def start_time(self, stage: str = "train") -> float | None:
        return self._start[stage]

    def end_time(self, stage: str = "train") -> float | None:
        return self._end[stage]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage`` (so far, while it runs)."""
        start, end = self._start[stage], self._end[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return offset + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of ``duration``, or ``None`` without one."""
        if self.duration is None:
            return None
        return self.duration.total_seconds() - self.time_elapsed(stage)

    def _check(self, trainer: TrainerView) -> None:
        remaining = self.time_remaining()
        if remaining is not None and remaining <= 0 and not trainer.should_stop:
            trainer.should_stop = True
            if self.verbose:
                trainer.print(f"Timer: the time budget of {self.duration} is used; training stops here.")

    def on_train_start(self, trainer: TrainerView, module: Module) -> None:
        self._start["train"], self._end["train"] = time.monotonic(), None

    def on_train_end(self, trainer: TrainerView, module: Module) -> None:
        self._end["train"] = time.monotonic()

    def on_validation_start(self, trainer: TrainerView, module: Module) -> None:
        self._start["validate"], self._end["validate"] = time.monotonic(), None

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        self._end["validate"] = time.monotonic()

    def on_test_start(self, trainer: TrainerView, module: Module) -> None:
        self._start["test"], self._end["test"] = time.monotonic(), None

    def on_test_end(self, trainer: TrainerView, module: Module) -> None:
        self._end["test"] = time.monotonic()

    def on_predict_start(self, trainer: TrainerView, module: Module) -> None:
        self._start["predict"], self._end["predict"] = time.monotonic(), None

    def on_predict_end(self, trainer: TrainerView, module: Module) -> None:
        self._end["predict"] = time.monotonic()

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.interval == "step":
            self._check(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self.interval == "epoch":
            self._check(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {"train": self.time_elapsed("train")}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))
