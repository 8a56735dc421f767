"""``LearningRateMonitor``: send each optimizer's learning rate to the loggers."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["LearningRateMonitor"]


class LearningRateMonitor(Callback):
    """Log ``lr-<Optimizer>`` (``/pg<n>`` per parameter group when there are several) to the loggers.

    :param logging_interval: ``"step"`` (with the step metrics, every ``log_every_n_steps``), ``"epoch"`` (at
        each epoch's start, under the step of its first batch, as in Lightning), or ``None``: per step when a
        scheduler steps per step, else per epoch.
    :param log_momentum: Also log ``momentum`` (or Adam's ``beta1``).
    :param log_weight_decay: Also log ``weight_decay``.

    The value logged for a step is the learning rate that step used.
    """

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise ConfigurationError(f"LearningRateMonitor(logging_interval={logging_interval!r}): expected 'step', "
                                     f"'epoch' or None.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self._names: list[str] = []
        self._interval = "epoch"
        self._pending: tuple[int, dict[str, float]] | None = None

    def on_train_start(self, trainer: TrainerView, module: Module) -> None:
        if not trainer.loggers:
            raise ConfigurationError("LearningRateMonitor needs a logger, but the Trainer has logger=False.")
        configured = {id(config.scheduler.optimizer): config.name for config in trainer.lr_scheduler_configs
                      if getattr(config.scheduler, "optimizer", None) is not None}
        names = []
        for optimizer in trainer.optimizers:
            inner = getattr(optimizer, "optimizer", optimizer)
            names.append(configured.get(id(inner)) or f"lr-{type(inner).__name__}")
        counts = Counter(names)
        seen: Counter[str] = Counter()
        self._names = []
        for name in names:
            if counts[name] > 1:
                self._names.append(f"{name}-{seen[name]}")
                seen[name] += 1
            else:
                self._names.append(name)
        steps = any(config.interval == "step" for config in trainer.lr_scheduler_configs)
        self._interval = self.logging_interval or ("step" if steps else "epoch")

    def _values(self, trainer: TrainerView) -> dict[str, float]:
        values: dict[str, float] = {}
        for name, optimizer in zip(self._names, trainer.optimizers, strict=False):
            groups = optimizer.param_groups
            for index, group in enumerate(groups):
                key = name if len(groups) == 1 else f"{name}/pg{index + 1}"
                values[key] = float(group["lr"])
                if self.log_momentum:
                    momentum = group.get("momentum", group.get("betas", (None,))[0])
                    if momentum is not None:
                        values[f"{key}-momentum"] = float(momentum)
                if self.log_weight_decay and "weight_decay" in group:
                    values[f"{key}-weight_decay"] = float(group["weight_decay"])
        return values

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        # The rate this epoch uses, at the step of its first batch: the batches that stepped before it (Lightning's).
        if self._interval == "epoch":
            step = trainer.global_step if module.automatic_optimization else None  # manual: the latest batch's
            trainer.log_to_loggers(self._values(trainer), step=step)

    def on_train_batch_start(self, trainer: TrainerView, module: Module, batch: Any, batch_idx: int) -> None:
        if self._interval == "step" and (trainer.global_step + 1) % trainer.log_every_n_steps == 0:
            self._pending = (trainer.global_step + 1, self._values(trainer))

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None and self._pending[0] == trainer.global_step:
            trainer.log_to_loggers(self._pending[1])
            self._pending = None
