"""``BasePredictionWriter``: write predictions as ``Trainer.predict`` makes them (Lightning's name and hooks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

WRITE_INTERVALS: Final = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Subclass it and override :meth:`write_on_batch_end` and/or :meth:`write_on_epoch_end`.

    Every process writes its own share (name files by ``trainer.global_rank``); ``batch_indices`` are the
    dataset indices of the samples, so the shares can be put back in order. A process whose share is a batch
    short predicts a filler batch that is never written (see the Trainer's evaluation data split).

    :param write_interval: ``"batch"``: after each batch; ``"epoch"``: once, with every prediction of the
        process; ``"batch_and_epoch"``: both.
    """

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in WRITE_INTERVALS:
            raise ConfigurationError(
                f"BasePredictionWriter(write_interval={write_interval!r}): expected one of {list(WRITE_INTERVALS)}."
            )
        self.interval = write_interval

    def write_on_batch_end(
        self, trainer: TrainerView, pl_module: Module, prediction: Any, batch_indices: list[int] | None, batch: Any,
        batch_idx: int, dataloader_idx: int,
    ) -> None:
        """Write one batch's prediction (``batch_indices``: its samples' dataset indices, ``None`` if unknown)."""
        raise ConfigurationError(
            f"{type(self).__qualname__}(write_interval={self.interval!r}) writes after each batch but does not "
            f"override write_on_batch_end; override it, or use write_interval='epoch'."
        )

    def write_on_epoch_end(
        self, trainer: TrainerView, pl_module: Module, predictions: Any, batch_indices: list[list[list[int]]]
    ) -> None:
        """Write every prediction of this process: ``predictions`` as ``Trainer.predict`` returns them (a list
        per loader, flat for one loader), ``batch_indices`` per loader, per batch."""
        raise ConfigurationError(
            f"{type(self).__qualname__}(write_interval={self.interval!r}) writes at the end but does not override "
            f"write_on_epoch_end; override it, or use write_interval='batch'."
        )

    def on_predict_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.interval == "epoch" or trainer.filler_batch:
            return
        self.write_on_batch_end(trainer, module, outputs, trainer.predict_batch_indices, batch, batch_idx,
                                dataloader_idx)

    def on_predict_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self.interval == "batch":
            return
        predictions = trainer.predictions
        self.write_on_epoch_end(trainer, module, predictions[0] if len(predictions) == 1 else predictions,
                                trainer.predict_epoch_batch_indices)
