"""``GradientAccumulationScheduler``: how many batches to accumulate, changing by epoch (Lightning's name)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core._checks import is_whole
from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView


class GradientAccumulationScheduler(Callback):
    """``scheduling={epoch: factor}``: from each listed epoch on, accumulate ``factor`` batches per optimizer step.

    ``{0: 1, 4: 2, 8: 4}``: one batch per step in epochs 0-3, two in 4-7, four from epoch 8. Without an entry for
    epoch 0, epochs before the first listed one use 1. As in Lightning, it replaces the Trainer's
    ``accumulate_grad_batches`` flag (which must stay 1) and needs automatic optimization.
    """

    def __init__(self, scheduling: Mapping[int, int]) -> None:
        if not scheduling:
            raise ConfigurationError("GradientAccumulationScheduler(scheduling={}): give at least one {epoch: factor}.")
        for epoch, factor in scheduling.items():
            if not is_whole(epoch, 0):
                raise ConfigurationError(
                    f"GradientAccumulationScheduler(scheduling={dict(scheduling)!r}): epoch {epoch!r} must be an "
                    f"int >= 0."
                )
            if not is_whole(factor, 1):
                raise ConfigurationError(
                    f"GradientAccumulationScheduler(scheduling={dict(scheduling)!r}): the factor {factor!r} of epoch "
                    f"{epoch} must be an int >= 1."
                )
        self.scheduling = {0: 1, **dict(scheduling)}
        self.epochs = sorted(self.scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(factor > 1 for factor in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The factor that applies in ``epoch``: the one of the latest listed epoch at or before it."""
        return self.scheduling[max(start for start in self.epochs if start <= epoch)]

    def on_train_start(self, trainer: TrainerView, module: Module) -> None:
        if not module.automatic_optimization:
            raise ConfigurationError(
                "GradientAccumulationScheduler needs automatic optimization: with automatic_optimization=False "
                "accumulate in training_step yourself, or drop the callback."
            )
        if trainer.config.accumulate_grad_batches != 1:
            raise ConfigurationError(
                f"Trainer(accumulate_grad_batches={trainer.config.accumulate_grad_batches}) together with a "
                f"GradientAccumulationScheduler: the scheduler decides the factor; drop one of them."
            )
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)
