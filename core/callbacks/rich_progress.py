"""``RichProgressBar``: the training progress drawn with rich (``pip install rich``), on global rank 0.

A bar per training epoch (and one per validation run) with the rate, the time left and the ``prog_bar`` metrics
under it. Lightning's options: ``refresh_rate`` (batches between redraws), ``leave`` (keep each finished epoch's
bar), ``theme`` (a :class:`RichProgressBarTheme`), ``console_kwargs`` (for ``rich.console.Console``).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from core._errors import ConfigurationError
from core.callbacks.progress import ProgressBar, _format_metrics

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["RichProgressBar", "RichProgressBarTheme"]


@dataclass
class RichProgressBarTheme:
    """Styles of the bar's parts (rich style strings), with Lightning's names and defaults."""

    description: str = ""
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = ""
    time: str = "dim"
    processing_speed: str = "dim underline"
    metrics: str = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


def _rich() -> Any:
    if importlib.util.find_spec("rich") is None:
        raise ConfigurationError("RichProgressBar and RichModelSummary need rich, which is not installed: pip install "
                                 "rich (or use core.callbacks.TQDMProgressBar / ModelSummary).")
    return importlib.import_module("rich")


class RichProgressBar(ProgressBar):
    """A rich progress display per epoch and per validation run, with the ``prog_bar`` metrics.

    :param refresh_rate: Batches between redraws of the position (``0``: no bar).
    :param leave: Keep the bar of each finished epoch on screen.
    :param theme: The styles.
    :param console_kwargs: Passed to ``rich.console.Console`` (``file=`` a stream, ``force_terminal``, ...).
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = False, theme: RichProgressBarTheme | None = None,
                 console_kwargs: dict[str, Any] | None = None, stream: IO[str] | None = None) -> None:
        _rich()
        super().__init__(refresh_rate, stream=stream)
        self.leave = leave
        self.theme = theme or RichProgressBarTheme()
        self.console_kwargs = dict(console_kwargs or {})
        self._progress: Any = None
        self._train_task: Any = None
        self._val_task: Any = None
        self._pending = 0

    @property
    def is_enabled(self) -> bool:
        return bool(self.refresh_rate)

    def _start(self) -> Any:
        if self._progress is None:
            progress_module = importlib.import_module("rich.progress")
            console_module = importlib.import_module("rich.console")
            theme = self.theme
            console = console_module.Console(**{"file": self.stream, **self.console_kwargs})
            self._progress = progress_module.Progress(
                progress_module.TextColumn("[progress.description]{task.description}", style=theme.description),
                progress_module.BarColumn(complete_style=theme.progress_bar,
                                          finished_style=theme.progress_bar_finished,
                                          pulse_style=theme.progress_bar_pulse),
                progress_module.MofNCompleteColumn(),
                progress_module.TimeRemainingColumn(),
                progress_module.TextColumn("{task.fields[speed]}", style=theme.processing_speed),
                progress_module.TextColumn("{task.fields[metrics]}", style=theme.metrics),
                console=console, transient=not self.leave, auto_refresh=False,
            )
            self._progress.start()
        return self._progress

    def _metrics(self, trainer: TrainerView) -> str:
        theme = self.theme
        return theme.metrics_text_delimiter.join(
            f"{name}: {value:{theme.metrics_format}}" for name, value in sorted(trainer.progress_bar_metrics.items()))

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        super().on_train_epoch_start(trainer, module)
        if not trainer.is_global_zero or not self.is_enabled:
            return
        progress = self._start()
        total = trainer.num_training_batches
        self._train_task = progress.add_task(
            f"Epoch {trainer.current_epoch}", total=int(total) if math.isfinite(total) else None,
            completed=trainer.batches_done, speed="", metrics="")
        self._pending = 0
        progress.refresh()

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        if self._train_task is None:
            return
        self._pending += 1
        if self._pending < max(1, self.refresh_rate or 1):
            return
        self._advance(trainer, self._train_task)

    def _advance(self, trainer: TrainerView, task: Any) -> None:
        progress = self._progress
        progress.update(task, advance=self._pending, metrics=self._metrics(trainer))
        elapsed = progress.tasks[progress.task_ids.index(task)].elapsed or 0.0
        done = progress.tasks[progress.task_ids.index(task)].completed
        progress.update(task, speed=f"{done / elapsed:.2f}it/s" if elapsed > 0 else "")
        progress.refresh()
        self._pending = 0

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self._train_task is None:
            return
        self._advance(trainer, self._train_task)
        if not self.leave:
            self._progress.remove_task(self._train_task)
        self._train_task = None

    def on_validation_start(self, trainer: TrainerView, module: Module) -> None:
        if not trainer.is_global_zero or not self.is_enabled or trainer.sanity_checking:
            return
        total = sum(batches for batches in trainer.num_val_batches if math.isfinite(batches))
        self._val_task = self._start().add_task("Validation", total=int(total) or None, speed="", metrics="")

    def on_validation_batch_end(self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if self._val_task is not None:
            self._progress.update(self._val_task, advance=1)

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        if self._val_task is not None:
            self._progress.remove_task(self._val_task)
            self._val_task = None
            self._progress.refresh()
        if trainer.is_global_zero and trainer.state == "validate" and self._progress is not None:
            self._progress.console.print(f"validation  {_format_metrics(trainer.progress_bar_metrics)}")

    def on_test_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.is_global_zero:
            self._start().console.print(f"test  {_format_metrics(trainer.progress_bar_metrics)}")

    def teardown(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._train_task = self._val_task = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_progress=None, _train_task=None, _val_task=None)
        return state
