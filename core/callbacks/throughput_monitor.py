"""``ThroughputMonitor``: batches, samples and items per second of each loop, sent to the loggers (Lightning's keys).

The rates are rolling averages over the last ``window_size`` batches, as Lightning's ``Throughput`` computes them:
nothing per second is logged before the window is full. A run on one process logs the ``device/`` rates only; with
several processes the global rates (this process's rate times the world size) are logged as well.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import torch

from core._errors import ConfigurationError, CoreWarning
from core.callbacks._callback import Callback
from core.lite import Throughput
from core.lite._throughput import device_peak_flops

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["ThroughputMonitor"]

# Lightning's RunningStage values: the prefix of every key ("train/device/samples_per_sec").
TRAIN: Final = "train"
VALIDATE: Final = "validate"
TEST: Final = "test"
PREDICT: Final = "predict"

# What Lightning's Throughput takes besides the two values the callback fills in (available_flops, world_size).
_THROUGHPUT_OPTIONS: Final = ("window_size", "separator", "using_sparse_model", "sparse_cuda_acceleration_factor")


class ThroughputMonitor(Callback):
    """Log ``<stage>/time``, ``/batches``, ``/samples`` (``/lengths``) and the rates
    ``<stage>/device/batches_per_sec``, ``/device/samples_per_sec`` (``/device/items_per_sec`` with ``length_fn``),
    plus the global ``<stage>/batches_per_sec`` ... with several processes; ``<stage>`` is ``train``, ``validate``,
    ``test`` or ``predict``. Every run of a loop (a fit, each validation in it, a test) measures afresh.

    Training logs at the end of an optimizer step, every ``log_every_n_steps`` steps, so that the time of the step
    is included; the time spent validating is taken out of the training rates. Evaluation and prediction log every
    ``log_every_n_steps`` batches, at their batch count. The sanity check is not measured.

    A Module with a ``flops_per_batch`` attribute adds ``device/flops_per_sec`` (``flops_per_sec`` across
    processes), and ``device/mfu`` where the device's peak flops in the precision's dtype are known
    (:func:`core.lite.get_available_flops`, looked up at ``setup``: CUDA GPUs and TPUs; not CPUs).

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
        self.available_flops: float | None = None  # the device's peak, found at setup: device/mfu
        Throughput(**self._options())  # refuse a bad window now, not at the first batch
        self._throughputs: dict[str, Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._batches: dict[str, int] = {}
        self._lengths: dict[str, int] = {}
        self._iterations: dict[str, int] = {}  # batches measured per stage, never reset: the logging step
        self._module_has_flops: bool | None = None

    def _options(self) -> dict[str, Any]:
        return {name: value for name, value in self.kwargs.items() if name in ("window_size", "separator")}

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self.available_flops = device_peak_flops(trainer.lite)

    def _start(self, trainer: TrainerView, stage: str) -> None:
        self._throughputs[stage] = Throughput(available_flops=self.available_flops, world_size=trainer.world_size,
                                              **self._options())
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
