"""Lightning's Fabric throughput utilities over core: ``Throughput``, ``ThroughputMonitor``, ``measure_flops`` and
``get_available_flops`` (``lightning.fabric.utilities.throughput``), with Lightning's keys and arithmetic.

The rates are rolling averages over the last ``window_size`` updates: nothing per second before the window is full.
``device/...`` keys are this process's rates; with several processes the global rates (times the world size) are
added. ``device/mfu`` is the device's flops per second over its peak (:func:`get_available_flops`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from core._errors import ConfigurationError
from core.lite._flops import get_available_flops

if TYPE_CHECKING:
    from core.lite._lite import Lite

_Number = TypeVar("_Number", int, float)


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

    def clear(self) -> None:
        self.values.clear()

    @property
    def full(self) -> bool:
        return len(self.values) == self.size

    def spread(self) -> _Number:
        """The last value minus the first one of the window."""
        return self.values[-1] - self.values[0]


class Throughput:
    """Batches, samples, items and flops per second over a rolling window (Lightning's ``Throughput``).

    :param available_flops: the peak flops of one device (:func:`get_available_flops`); with it, ``device/mfu``.
    :param world_size: the number of processes; global rates are added when it is above 1.
    :param window_size: the updates a rate is averaged over (at least 2).
    :param separator: between ``device`` and a key (``device/samples_per_sec``).
    """

    def __init__(self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100,
                 separator: str = "/") -> None:
        if world_size < 1:
            raise ConfigurationError(f"Throughput(world_size={world_size}): expected at least 1 process.")
        if window_size < 2:
            raise ConfigurationError(
                f"Throughput(window_size={window_size}): a rate needs at least 2 points; pass window_size >= 2."
            )
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self.times: _IncreasingWindow[float] = _IncreasingWindow(window_size)
        self.batches: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.samples: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.lengths: _IncreasingWindow[int] = _IncreasingWindow(window_size)
        self.flops: deque[float] = deque(maxlen=window_size)

    def update(self, *, time: float, batches: int, samples: int, lengths: int | None = None,
               flops: float | None = None) -> None:
        """Add the running totals of this process (``flops``: spent since the last update, on this process)."""
        if samples < batches:
            raise ConfigurationError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        if lengths is not None and lengths < samples:
            raise ConfigurationError(f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})")
        self.times.append(time)
        self.batches.append(batches)
        self.samples.append(samples)
        if lengths is not None:
            self.lengths.append(lengths)
            if len(self.samples.values) != len(self.lengths.values):
                raise ConfigurationError(
                    f"If lengths are passed ({len(self.lengths.values)}), there needs to be the same number of "
                    f"samples ({len(self.samples.values)}): pass lengths on every update or on none."
                )
        if flops is not None:
            self.flops.append(flops * self.world_size)  # summed over the processes

    def compute(self) -> dict[str, float]:
        """The totals, and the rates once the window is full (Lightning's keys)."""
        sep, several = self.separator, self.world_size > 1
        metrics: dict[str, float] = {
            "time": self.times.values[-1],
            "batches": self.batches.values[-1],
            "samples": self.samples.values[-1],
        }
        if self.lengths.values:
            metrics["lengths"] = self.lengths.values[-1]
        if self.times.full:
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
            flops_per_sec = (sum(self.flops) - self.flops[0]) / self.times.spread()
            if several:
                metrics["flops_per_sec"] = flops_per_sec
            metrics[f"device{sep}flops_per_sec"] = flops_per_sec / self.world_size
            if self.available_flops:
                metrics[f"device{sep}mfu"] = flops_per_sec / self.world_size / self.available_flops
        return metrics

    def reset(self) -> None:
        """Forget every update."""
        for window in (self.times, self.batches, self.samples, self.lengths):
            window.clear()
        self.flops.clear()


def device_peak_flops(lite: Lite) -> int | None:
    """The peak flops of the launched ``lite``'s device in its precision's compute dtype (the precision plugin's
    ``dtype``, float32 without one), as Lightning's monitors look them up; None where the table has none (CPU)."""
    dtype = getattr(lite.strategy.precision, "dtype", torch.float32)  # type: ignore[attr-defined]
    return get_available_flops(lite.device, dtype)


class ThroughputMonitor(Throughput):
    """A :class:`Throughput` for a launched :class:`core.Lite`: its world size, its device's peak flops in the
    precision's dtype, and :meth:`compute_and_log` to the Lite's loggers (Lightning's Fabric ``ThroughputMonitor``).

    Only global rank 0 measures and logs: on the other ranks ``update``, ``compute``, ``compute_and_log`` and
    ``reset`` do nothing (``compute`` returns ``{}``), as in Lightning.
    """

    def __init__(self, lite: Lite, **kwargs: Any) -> None:
        lite._require_running("ThroughputMonitor")  # before a launch the world size is not known
        super().__init__(available_flops=device_peak_flops(lite), world_size=lite.world_size, **kwargs)
        self._lite = lite
        self._rank_zero = lite.global_rank == 0
        self.step = -1

    def update(self, **kwargs: Any) -> None:
        if self._rank_zero:
            super().update(**kwargs)

    def compute(self) -> dict[str, float]:
        return super().compute() if self._rank_zero else {}

    def reset(self) -> None:
        if self._rank_zero:
            super().reset()

    def compute_and_log(self, step: int | None = None) -> dict[str, float]:
        """:meth:`compute`, logged with ``Lite.log_dict`` at ``step`` (by default one more than the last call's)."""
        if not self._rank_zero:
            return {}
        self.step = self.step + 1 if step is None else step
        metrics = self.compute()
        self._lite.log_dict(metrics, step=self.step)
        return metrics


def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """The flops of ``forward_fn()`` (and of ``loss_fn(output).backward()`` when given), counted by torch's
    ``FlopCounterMode``; a model on the meta device costs nothing to measure (Lightning's ``measure_flops``)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return int(counter.get_total_flops())
