"""Stepping the learning-rate schedulers ``configure_optimizers`` returned (read by core.module._optimizers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core._errors import ConfigurationError
from core.module._optimizers import SchedulerConfig


def _step(scheduler: Any, metric: Any) -> None:
    if metric is None:
        scheduler.step()
    else:
        scheduler.step(metric)


def step_schedulers(
    configs: Sequence[SchedulerConfig],
    interval: str,
    count: int,
    read_metrics: Callable[[], Mapping[str, Any]],
    step: Callable[[Any, Any], None] = _step,
) -> None:
    """Step the schedulers of ``interval`` whose frequency divides ``count`` (steps or epochs done so far).

    ``read_metrics`` gives the logged values, read only for a ``ReduceLROnPlateau``; ``step(scheduler, metric)``
    steps one (the Module's ``lr_scheduler_step``).
    """
    for config in configs:
        if config.interval != interval or count % config.frequency:
            continue
        if not config.reduce_on_plateau:
            step(config.scheduler, None)
            continue
        metrics = read_metrics()
        value = metrics.get(config.monitor) if config.monitor is not None else None
        if value is None:
            if config.strict:
                raise ConfigurationError(
                    f"ReduceLROnPlateau watches {config.monitor!r}, which was not logged; logged metrics: "
                    f"{sorted(metrics)}. Log it with self.log({config.monitor!r}, ...), or set 'strict': False."
                )
            continue
        step(config.scheduler, float(value))
