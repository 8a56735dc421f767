"""``WeightAveraging`` and ``EMAWeightAveraging``: an averaged copy of the model, used for validation and at the end.

An :class:`torch.optim.swa_utils.AveragedModel` of the Module is built when fit starts and updated after the
optimizer steps (and epochs) that :meth:`WeightAveraging.should_update` accepts. While validating, the averaged
weights are swapped into the Module (and back after); when training ends they are copied into it for good.
Checkpoints hold the averaged weights as ``state_dict`` (what ``validate`` / ``test`` / ``load_from_checkpoint``
load) and the training weights as ``current_model_state``, from which ``fit`` resumes (Lightning 2.6's layout).
"""

from __future__ import annotations

import itertools
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from core._errors import ConfigurationError, CoreWarning
from core.callbacks._callback import Callback
from core.module import Module

if TYPE_CHECKING:
    from core.module import TrainerView

__all__ = ["EMAWeightAveraging", "WeightAveraging"]

_PREFIX = "module."  # of the Module's keys in the AveragedModel's state dict


class WeightAveraging(Callback):
    """Average the Module's weights over training (SWA by default; EMA with ``avg_fn=get_ema_avg_fn(...)``).

    Lightning's callback: override :meth:`should_update` to choose when the average takes in the current weights
    (by default after every optimizer step).

    :param device: Where the averaged model lives (``None``: the Module's device); ``"cpu"`` saves device memory.
    :param use_buffers: Average the buffers too (BatchNorm statistics); ``False`` averages the parameters only and
        copies the buffers (then recompute BatchNorm statistics yourself: ``torch.optim.swa_utils.update_bn``).
    :param kwargs: Passed to ``AveragedModel``: ``avg_fn`` or ``multi_avg_fn``.
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - {"avg_fn", "multi_avg_fn"})
        if unknown:
            raise ConfigurationError(
                f"{type(self).__name__}(**{kwargs!r}): unknown option(s) {unknown}; AveragedModel takes avg_fn or "
                f"multi_avg_fn."
            )
        self._device: torch.device | int | None = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        # Steps taken at the latest update: 0 makes the first check come after the first optimizer step.
        self._latest_update_step = 0
        # The epoch after which the average was last updated; -1: none yet.
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average now: called after each optimizer step with its zero-based ``step_idx``,
        and at the end of each training epoch with its ``epoch_idx``. By default: after every step."""
        return step_idx is not None

    # Building, updating -----------------------------------------------------------------------------------------------

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if type(module).configure_model is not Module.configure_model:
            warnings.warn(
                f"{type(self).__name__} copies the whole model, so it calls configure_model() now to create its "
                f"layers, outside the strategy (no sharding): a sharded model may not fit in memory.",
                CoreWarning,
                stacklevel=2,
            )
            module.configure_model()
        device = self._device if self._device is not None else module.device
        self._average_model = AveragedModel(module, device=device, use_buffers=self._use_buffers, **self._kwargs)

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # global_step counts the steps taken (1 after the first); should_update gets a zero-based index.
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=trainer.global_step - 1):
            self._averaged().update_parameters(module)
            self._latest_update_step = trainer.global_step

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        epoch = trainer.current_epoch
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            self._averaged().update_parameters(module)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: TrainerView, module: Module) -> None:
        for averaged, current in self._pairs(module):
            current.data.copy_(averaged.data)

    def on_validation_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        if self._average_model is not None:
            self._swap(module)

    def on_validation_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self._average_model is not None:
            self._swap(module)

    def _averaged(self) -> AveragedModel:
        if self._average_model is None:
            raise ConfigurationError(
                f"{type(self).__name__} builds its averaged model in setup('fit'), which has not run."
            )
        return self._average_model

    def _pairs(self, module: Module) -> zip[tuple[torch.Tensor, torch.Tensor]]:
        averaged = self._averaged().module
        return zip(
            itertools.chain(averaged.parameters(), averaged.buffers()),
            itertools.chain(module.parameters(), module.buffers()),
            strict=True,
        )

    def _swap(self, module: Module) -> None:
        for averaged, current in self._pairs(module):
            kept = averaged.data.clone()
            averaged.data.copy_(current.data)
            current.data.copy_(kept)

    # Checkpoints ------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self._latest_update_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(self, trainer: TrainerView, module: Module, checkpoint: dict[str, Any]) -> None:
        """The averaged weights become ``state_dict``; the training ones move to ``current_model_state``; the
        ``AveragedModel``'s own entries (``n_averaged``) go to ``averaging_state``."""
        if self._average_model is None:
            return  # outside fit: after training the Module holds the averaged weights already
        averaged = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        checkpoint["state_dict"] = {
            name[len(_PREFIX) :]: value for name, value in averaged.items() if name.startswith(_PREFIX)
        }
        checkpoint["averaging_state"] = {
            name: value for name, value in averaged.items() if not name.startswith(_PREFIX)
        }

    def on_load_checkpoint(self, trainer: TrainerView, module: Module, checkpoint: dict[str, Any]) -> None:
        # The Trainer has loaded ``state_dict`` into the Module already: from one of our checkpoints, the average.
        if self._average_model is None:
            return  # validate / test / predict: the Module holds the averaged weights, which is what they evaluate
        if "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            average = {_PREFIX + name: value for name, value in module.state_dict().items()}
            self._average_model.load_state_dict({**average, **checkpoint["averaging_state"]})
            module.load_state_dict(checkpoint["current_model_state"])
        else:
            warnings.warn(
                f"The checkpoint was not saved with {type(self).__name__}: the averaged model starts from its weights, "
                f"as the Module does.",
                CoreWarning,
                stacklevel=2,
            )
            self._average_model.module.load_state_dict(module.state_dict())


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights: ``average = decay * average + (1 - decay) * weights``, the
    first update copying the weights.

    :param decay: The weight of the old average at each update.
    :param update_every_n_steps: Update after every n-th optimizer step (the zero-based step index divisible by n).
    :param update_starting_at_step: Update only from this zero-based step index on (``None``: from the start).
    :param update_starting_at_epoch: Also update at the end of every epoch from this one on (``None``: never by
        epoch).
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigurationError(f"EMAWeightAveraging(decay={decay!r}): expected a number in [0, 1].")
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        return (
            epoch_idx is not None
            and self.update_starting_at_epoch is not None
            and epoch_idx >= self.update_starting_at_epoch
        )
