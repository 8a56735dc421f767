"""Progress bars: steps, rate, ETA and the metrics logged with ``prog_bar=True``, on global rank 0 only.

:class:`ProgressBar` prints plain lines (no dependency); :class:`TQDMProgressBar` draws a bar with tqdm
when it is installed (``pip install tqdm``). The Trainer's default is the tqdm one when tqdm is importable.
Metric values are converted to numbers only when a line or the bar is redrawn.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from core._checks import is_whole
from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["ProgressBar", "TQDMProgressBar", "default_progress_bar"]


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _format_metrics(metrics: dict[str, Any]) -> str:
    return "  ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in sorted(metrics.items()))


class ProgressBar(Callback):
    """Print a progress line every ``refresh_rate`` training batches (or every ``interval`` seconds) and at
    the end of every epoch: epoch, step, rate, ETA of the epoch, and the ``prog_bar`` metrics.

    :param refresh_rate: Batches between lines; ``None`` prints by time instead (``interval``). ``0`` prints
        only the line at the end of each epoch.
    :param interval: Seconds between lines when ``refresh_rate`` is ``None``.
    :param stream: Where to write (standard output by default).
    """

    def __init__(self, refresh_rate: int | None = None, interval: float = 10.0, stream: IO[str] | None = None) -> None:
        if refresh_rate is not None and not is_whole(refresh_rate, 0):
            raise ConfigurationError(f"ProgressBar(refresh_rate={refresh_rate!r}): expected a whole number >= 0.")
        self.refresh_rate = refresh_rate
        self.interval = interval
        self._stream = stream
        self._epoch_started = 0.0
        self._last_line = 0.0
        self._batches = 0
        self._attached_trainer: TrainerView | None = None

    @property
    def stream(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stdout

    @property
    def trainer(self) -> TrainerView:
        """The Trainer of the run this bar shows (Lightning's ``progress_bar.trainer``)."""
        if self._attached_trainer is None:
            raise ConfigurationError(f"{type(self).__name__}.trainer: the bar is not part of a run yet.")
        return self._attached_trainer

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self._attached_trainer = trainer

    @property
    def total_train_batches(self) -> float:
        """The training batches of the current epoch (``inf`` for an endless loader), as Lightning's: a run
        bounded by ``max_steps`` alone (``max_epochs=-1``) counts only the steps left."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps > 0:
            return min(trainer.num_training_batches, trainer.max_steps - trainer.global_step)
        return trainer.num_training_batches

    @property
    def total_val_batches(self) -> float:
        """The validation batches of the current epoch over every validation loader, as Lightning's: ``0`` in an
        epoch that does not validate (``check_val_every_n_epoch``)."""
        trainer = self.trainer
        every_n = trainer.config.check_val_every_n_epoch
        if every_n is not None and (trainer.current_epoch + 1) % every_n:
            return 0
        return sum(trainer.num_val_batches)

    def get_metrics(self, trainer: TrainerView, module: Module) -> dict[str, Any]:
        """What the bar shows after its position, as Lightning's ``get_metrics``: the run's logger version as
        ``v_num`` (its last 4 characters for a name) and ``trainer.progress_bar_metrics``. Override it to change
        what is shown (``items.pop("v_num", None)``)."""
        shown: dict[str, Any] = {}
        loggers = trainer.loggers
        if loggers:
            version = loggers[0].version if len(loggers) == 1 else "_".join(
                dict.fromkeys(str(logger.version) for logger in loggers))
            if version not in ("", None):
                shown["v_num"] = version[-4:] if isinstance(version, str) else version
        return {**shown, **trainer.progress_bar_metrics}

    def _epoch_label(self, trainer: TrainerView) -> str:
        total = trainer.max_epochs
        return f"epoch {trainer.current_epoch + 1}" + (f"/{total}" if total != -1 else "")

    def _line(self, trainer: TrainerView, module: Module, done: int) -> str:
        total = trainer.num_training_batches
        elapsed = max(time.monotonic() - self._epoch_started, 1e-9)
        rate = done / elapsed
        remaining = (total - done) / rate if rate > 0 and math.isfinite(total) else math.inf
        of_total = f"/{int(total)}" if math.isfinite(total) else ""
        parts = [
            self._epoch_label(trainer),
            f"step {done}{of_total}",
            f"{rate:.1f} it/s",
            f"ETA {_duration(remaining)}",
            _format_metrics(self.get_metrics(trainer, module)),
        ]
        return "  ".join(part for part in parts if part)

    def _write(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        self._epoch_started = self._last_line = time.monotonic()
        self._batches = 0

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        if not trainer.is_global_zero:
            return
        rate = self.refresh_rate
        if rate is None:
            now = time.monotonic()
            if now - self._last_line < self.interval:
                return
            self._last_line = now
        elif rate == 0 or self._batches % rate:
            return
        self._write(self._line(trainer, module, batch_idx + 1))

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.is_global_zero:
            self._write(self._line(trainer, module, trainer.batches_done))

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.is_global_zero and trainer.state in ("validate",):
            self._write(f"validation  {_format_metrics(self.get_metrics(trainer, module))}")

    def on_test_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.is_global_zero:
            self._write(f"test  {_format_metrics(self.get_metrics(trainer, module))}")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_stream"] = None  # an open stream does not travel to other processes
        state["_attached_trainer"] = None
        return state


class TQDMProgressBar(ProgressBar):
    """A tqdm bar per training epoch with the ``prog_bar`` metrics as its postfix (needs ``pip install tqdm``).

    :param refresh_rate: Batches between redraws of the position (the postfix is redrawn at most every
        ``interval`` seconds, since reading metrics may wait for the device).
    """

    def __init__(self, refresh_rate: int = 1, interval: float = 0.2, stream: IO[str] | None = None) -> None:
        if importlib.util.find_spec("tqdm") is None:
            raise ConfigurationError("TQDMProgressBar needs tqdm, which is not installed: pip install tqdm "
                                     "(or use core.callbacks.ProgressBar, which prints plain lines).")
        super().__init__(refresh_rate, interval, stream)
        self._bar: Any = None
        self._pending = 0

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        super().on_train_epoch_start(trainer, module)
        if not trainer.is_global_zero:
            return
        tqdm = importlib.import_module("tqdm.auto").tqdm
        total = trainer.num_training_batches
        self._bar = tqdm(
            total=int(total) if math.isfinite(total) else None,
            desc=self._epoch_label(trainer),
            file=self.stream,
            dynamic_ncols=True,
            leave=True,
            initial=trainer.batches_done,
        )
        self._pending = 0

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._bar is None:
            return
        self._pending += 1
        if self._pending < max(1, self.refresh_rate or 1):
            return
        self._bar.update(self._pending)
        self._pending = 0
        now = time.monotonic()
        if now - self._last_line >= self.interval:
            self._last_line = now
            self._bar.set_postfix_str(_format_metrics(self.get_metrics(trainer, module)), refresh=False)

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self._bar is None:
            return
        self._bar.update(self._pending)
        self._bar.set_postfix_str(_format_metrics(self.get_metrics(trainer, module)))
        self._bar.close()
        self._bar = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_bar"] = None
        return state


def default_progress_bar() -> ProgressBar:
    """The tqdm bar when tqdm is installed, else plain lines."""
    if importlib.util.find_spec("tqdm") is not None:
        return TQDMProgressBar()
    return ProgressBar()
