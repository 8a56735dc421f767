"""``ThroughputMonitor``: batches, samples and items per second of each loop, sent to the loggers (Lightning's keys).

The rates are rolling averages over the last ``window_size`` batches, as Lightning's ``Throughput`` computes them:
nothing per second is logged before the window is full. A run on one process logs the ``device/`` rates only; with
several processes the global rates (this process's rate times the world size) are logged as well.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import torch

from core._errors import ConfigurationError, CoreWarning
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["ThroughputMonitor"]

_Number = TypeVar("_Number", int, float)

# Lightning's RunningStage values: the prefix of every key ("train/device/samples_per_sec").
TRAIN: Final = "train"
VALIDATE: Final = "validate"
TEST: Final = "test"
PREDICT: Final = "predict"

# What Lightning's Throughput takes besides the two values the callback fills in (available_flops, world_size).
_THROUGHPUT_OPTIONS: Final = ("window_size", "separator", "using_sparse_model", "sparse_cuda_acceleration_factor")


class _IncreasingWindow(Generic[_Number]):
    """The latest ``size`` values of a running total; a value that does not increase is a caller's bug."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: list[_Number] = []

    def append(self, value: _Number) -> None:
        if self.values and value <= self.values[-1]:
            raise ConfigurationError(f"Expected the value to increase, last: {self.values[-1]}, current: {value}")
        self.values.append(value)
        if len(self.values) > self.size:
            del self.values[0]

    @property
    def full(self) -> bool:
        return len(self.values) == self.size

    def spread(self) -> _Number:
        """The last value minus the first one of the window."""
        return self.values[-1] - self.values[0]


class _Throughput:
    """Totals and rolling rates of one loop: Lightning's ``Throughput`` without the device peak (no MFU)."""

    def __init__(self, world_size: int, window_size: int = 100, separator: str = "/") -> None:
        if window_size < 2:
            raise ConfigurationError(
                f"ThroughputMonitor(window_size={window_size}): a rate needs at least 2 points; pass window_size >= 2."
            )
        self.world_size = world_size
        self.separator = separator
        self.times: _IncreasingWindow[float] = _IncreasingWindow(window_size)
        self.batches: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.samples: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.lengths: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.flops: deque[float] = deque(maxlen=window_size)

    def update(self, *, time: float, batches: int, samples: int, lengths: int | None, flops: float | None) -> None:
        """Add the running totals after one more batch (``flops``: that batch's, on one process)."""
        self.times.append(time)
        self.batches.append(batches)
        self.samples.append(samples)
        if lengths is not None:
            self.lengths.append(lengths)
        if flops is not None:
            self.flops.append(flops * self.world_size)

    def compute(self) -> dict[str, float]:
        sep, several = self.separator, self.world_size > 1
        metrics: dict[str, float] = {
            "time": self.times.values[-1],
            "batches": self.batches.values[-1],
            "samples": self.samples.values[-1],
        }
        if self.lengths.values:
            metrics["lengths"] = self.lengths.values[-1]
        if not self.times.full:
            return metrics
        elapsed = self.times.spread()
        per_device = {
            "batches_per_sec": self.batches.spread() / elapsed,
            "samples_per_sec": self.samples.spread() / elapsed,
        }
        if self.lengths.full:
            per_device["items_per_sec"] = self.lengths.spread() / elapsed
        for name, rate in per_device.items():
            metrics[f"device{sep}{name}"] = rate
            if several:
                metrics[name] = rate * self.world_size
        if len(self.flops) == self.flops.maxlen:
            # Each update adds the flops of one batch; the first one's were spent before the window began.
            flops_per_sec = (sum(self.flops) - self.flops[0]) / elapsed
            metrics[f"device{sep}flops_per_sec"] = flops_per_sec / self.world_size
            if several:
                metrics["flops_per_sec"] = flops_per_sec
        return metrics


class ThroughputMonitor(Callback):
    """Log ``<stage>/time``, ``/batches``, ``/samples`` (``/lengths``) and the rates
    ``<stage>/device/batches_per_sec``, ``/device/samples_per_sec`` (``/device/items_per_sec`` with ``length_fn``),
    plus the global ``<stage>/batches_per_sec`` ... with several processes; ``<stage>`` is ``train``, ``validate``,
    ``test`` or ``predict``. Every run of a loop (a fit, each validation in it, a test) measures afresh.

    Training logs at the end of an optimizer step, every ``log_every_n_steps`` steps, so that the time of the step
    is included; the time spent validating is taken out of the training rates. Evaluation and prediction log every
    ``log_every_n_steps`` batches, at their batch count. The sanity check is not measured.

    A Module with a ``flops_per_batch`` attribute adds ``device/flops_per_sec`` (``flops_per_sec`` across
    processes); ``device/mfu`` is never logged, since it needs the device's peak flops, which core does not tabulate.

    :param batch_size_fn: The number of samples in a batch: ``lambda batch: batch[0].size(0)``. The rates assume it
        is the same on every process.
    :param length_fn: The number of items (tokens, pixels) in a batch, for ``items_per_sec``.
    :param kwargs: Lightning's ``Throughput`` options: ``window_size`` (100 batches), ``separator`` (``"/"``);
        ``using_sparse_model`` and ``sparse_cuda_acceleration_factor`` are accepted and unused (they scale the MFU).
    """

    def __init__(
        self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None, **kwargs: Any
    ) -> None:
        unknown = sorted(set(kwargs) - set(_THROUGHPUT_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"ThroughputMonitor(**{kwargs!r}): unknown option(s) {unknown}; it takes {list(_THROUGHPUT_OPTIONS)}."
            )
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.kwargs = kwargs
        self.available_flops: float | None = None  # no table of device peaks here: no MFU
        _Throughput(1, **self._options())  # refuse a bad window now, not at the first batch
        self._throughputs: dict[str, _Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._batches: dict[str, int] = {}
        self._lengths: dict[str, int] = {}
        self._iterations: dict[str, int] = {}  # batches measured per stage, never reset: the logging step
        self._module_has_flops: bool | None = None

    def _options(self) -> dict[str, Any]:
        return {name: value for name, value in self.kwargs.items() if name in ("window_size", "separator")}

    def _start(self, trainer: TrainerView, stage: str) -> None:
        self._throughputs[stage] = _Throughput(trainer.world_size, **self._options())
        self._samples[stage] = self._batches[stage] = self._lengths[stage] = 0
        self._t0s[stage] = time.perf_counter()

    @torch.no_grad()
    def _update(self, trainer: TrainerView, module: Module, batch: Any, stage: str) -> None:
        if trainer.lite.device.type == "cuda":
            torch.cuda.synchronize()  # the time of the kernels, not of their launch
        elapsed = time.perf_counter() - self._t0s[stage]
        samples = self.batch_size_fn(batch)
        if samples < 1:
            raise ConfigurationError(
                f"ThroughputMonitor's batch_size_fn returned {samples!r} for a batch; expected >= 1."
            )
        if self.length_fn is not None:
            items = self.length_fn(batch)
            if items < samples:
                raise ConfigurationError(
                    f"ThroughputMonitor's length_fn returned {items!r} items for a batch of {samples} samples; "
                    f"a sample has at least one item."
                )
            self._lengths[stage] += items
        if self._module_has_flops is None:
            self._module_has_flops = hasattr(module, "flops_per_batch")
            if not self._module_has_flops:
                warnings.warn(
                    f"ThroughputMonitor computes flops from a `flops_per_batch` attribute of the Module; "
                    f"{type(module).__name__} has none, so no flops are logged.",
                    CoreWarning,
                    stacklevel=2,
                )
        self._samples[stage] += samples
        self._batches[stage] += 1
        self._iterations[stage] = self._iterations.get(stage, 0) + 1
        self._throughputs[stage].update(
            time=elapsed,
            batches=self._batches[stage],
            samples=self._samples[stage],
            lengths=self._lengths[stage] if self.length_fn is not None else None,
            flops=getattr(module, "flops_per_batch", None) if self._module_has_flops else None,
        )

    def _log(self, trainer: TrainerView, stage: str, step: int | None = None) -> None:
        throughput = self._throughputs[stage]
        metrics = {f"{stage}{throughput.separator}{name}": value for name, value in throughput.compute().items()}
        trainer.log_to_loggers(metrics, step=step)

    # Training ---------------------------------------------------------------------------------------------------------

    def on_train_start(self, trainer: TrainerView, module: Module) -> None:
        self._start(trainer, TRAIN)

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._update(trainer, module, batch, TRAIN)
        window_done = (
            trainer.batches_done % trainer.accumulate_grad_batches == 0
            or trainer.batches_done >= trainer.num_training_batches
        )
        if window_done and (trainer.global_step % trainer.log_every_n_steps == 0 or trainer.should_stop):
            self._log(trainer, TRAIN)

    # Evaluation -------------------------------------------------------------------------------------------------------

    def _evaluation_batch_end(self, trainer: TrainerView, module: Module, batch: Any, stage: str) -> None:
        self._update(trainer, module, batch, stage)
        iteration = self._iterations[stage]
        if iteration % trainer.log_every_n_steps == 0:
            self._log(trainer, stage, step=iteration)

    def on_validation_start(self, trainer: TrainerView, module: Module) -> None:
        if not trainer.sanity_checking:
            self._start(trainer, VALIDATE)

    def on_validation_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._evaluation_batch_end(trainer, module, batch, VALIDATE)

    def on_validation_end(self, trainer: TrainerView, module: Module) -> None:
        if trainer.sanity_checking or trainer.state != "fit" or TRAIN not in self._t0s:
            return
        # Move the training clock's start by the time spent validating, so that the training rates leave it out.
        train_times, val_times = self._throughputs[TRAIN].times.values, self._throughputs[VALIDATE].times.values
        training_finished = self._t0s[TRAIN] + (train_times[-1] if train_times else 0.0)
        before_validation = self._t0s[VALIDATE] - training_finished
        self._t0s[TRAIN] += before_validation + (val_times[-1] if val_times else 0.0)

    def on_test_start(self, trainer: TrainerView, module: Module) -> None:
        self._start(trainer, TEST)

    def on_test_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._evaluation_batch_end(trainer, module, batch, TEST)

    def on_predict_start(self, trainer: TrainerView, module: Module) -> None:
        self._start(trainer, PREDICT)

    def on_predict_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._evaluation_batch_end(trainer, module, batch, PREDICT)
