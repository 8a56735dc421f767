"""What ``Module.configure_optimizers`` may return, read into optimizers and scheduler configurations.

Below the Trainer and the callbacks (the layers of CONTRIBUTING's map): both read the same shapes."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreWarning

INTERVALS: Final = ("epoch", "step")
_SCHEDULER_KEYS: Final = frozenset({"scheduler", "interval", "frequency", "monitor", "strict", "name"})
_OPTIMIZER_KEYS: Final = frozenset({"optimizer", "lr_scheduler", "monitor"})

_SHAPES: Final = (
    "an optimizer; a list of optimizers; ([optimizers], [schedulers]); {'optimizer': ..., 'lr_scheduler': ...}; "
    "or a list of such dicts"
)


@attrs.frozen
class SchedulerConfig:
    """One learning-rate scheduler and when the Trainer steps it."""

    scheduler: Any
    interval: str = attrs.field(default="epoch")
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None

    @interval.validator
    def _check_interval(self, _: object, value: str) -> None:
        if value not in INTERVALS:
            raise ConfigurationError(f"lr_scheduler interval={value!r}: expected 'epoch' or 'step'.")

    @property
    def reduce_on_plateau(self) -> bool:
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _is_optimizer(value: object) -> bool:
    return isinstance(value, torch.optim.Optimizer)


def _scheduler_config(value: Any, monitor: str | None) -> SchedulerConfig:
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - _SCHEDULER_KEYS)
        if unknown or "scheduler" not in value:
            raise ConfigurationError(
                f"An lr_scheduler dict needs 'scheduler' and may have {sorted(_SCHEDULER_KEYS - {'scheduler'})}; "
                f"got keys {sorted(value)}."
            )
        frequency = value.get("frequency", 1)
        if not is_whole(frequency, 1):
            raise ConfigurationError(f"lr_scheduler frequency={frequency!r}: expected a whole number >= 1.")
        config = SchedulerConfig(
            scheduler=value["scheduler"],
            interval=value.get("interval", "epoch"),
            frequency=frequency,
            monitor=value.get("monitor", monitor),
            strict=bool(value.get("strict", True)),
            name=value.get("name"),
        )
    else:
        config = SchedulerConfig(scheduler=value, monitor=monitor)
    if not callable(getattr(config.scheduler, "step", None)):
        raise ConfigurationError(f"{config.scheduler!r} is not a learning-rate scheduler (it has no step()).")
    if config.reduce_on_plateau and config.monitor is None:
        raise ConfigurationError(
            "ReduceLROnPlateau needs the metric it watches: return {'optimizer': ..., 'lr_scheduler': "
            "{'scheduler': ..., 'monitor': 'val_loss'}} from configure_optimizers."
        )
    return config


def _from_dicts(items: Sequence[Mapping[str, Any]]) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    optimizers, schedulers = [], []
    for item in items:
        unknown = sorted(set(item) - _OPTIMIZER_KEYS)
        if unknown or "optimizer" not in item:
            raise ConfigurationError(
                f"configure_optimizers returned a dict with keys {sorted(item)}; it needs 'optimizer' and may have "
                f"'lr_scheduler' and 'monitor'."
            )
        optimizers.append(item["optimizer"])
        if item.get("lr_scheduler") is not None:
            schedulers.append(_scheduler_config(item["lr_scheduler"], item.get("monitor")))
    return optimizers, schedulers


class NoOptimizer(torch.optim.Optimizer):
    """What a run steps when ``configure_optimizers`` returned ``None`` (Lightning's rule): ``step(closure)`` runs
    the closure (the forward and backward) and changes nothing; its state is empty."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1)], {})

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return "No Optimizer"


def parse_optimizers(returned: Any) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """Read what ``configure_optimizers`` returned into ``(optimizers, scheduler configs)``; ``None`` is a run
    without an optimizer (a :class:`NoOptimizer`, with a warning), as in Lightning."""
    schedulers: list[SchedulerConfig]
    if returned is None:
        warnings.warn(
            "`configure_optimizers` returned `None`, this fit will run with no optimizer: the steps run the forward "
            "and backward and change no parameter. Return an optimizer to train.", CoreWarning, stacklevel=3
        )
        returned = NoOptimizer()
    if _is_optimizer(returned):
        optimizers, schedulers = [returned], []
    elif isinstance(returned, Mapping):
        optimizers, schedulers = _from_dicts([returned])
    elif isinstance(returned, (list, tuple)) and returned and all(isinstance(item, Mapping) for item in returned):
        optimizers, schedulers = _from_dicts(returned)
    elif (
        isinstance(returned, (list, tuple)) and len(returned) == 2 and isinstance(returned[0], (list, tuple))
    ):
        optimizers = list(returned[0])
        listed = returned[1] if isinstance(returned[1], (list, tuple)) else [returned[1]]
        schedulers = [_scheduler_config(item, None) for item in listed]
    elif isinstance(returned, (list, tuple)):
        optimizers, schedulers = list(returned), []
    else:
        raise ConfigurationError(f"configure_optimizers returned {returned!r}; expected {_SHAPES}.")
    bad = [optimizer for optimizer in optimizers if not _is_optimizer(optimizer)]
    if not optimizers or bad:
        raise ConfigurationError(
            f"configure_optimizers returned {returned!r}: expected {_SHAPES}, with torch.optim.Optimizer objects"
            + (f" (got {bad[0]!r})." if bad else ".")
        )
    return optimizers, schedulers

