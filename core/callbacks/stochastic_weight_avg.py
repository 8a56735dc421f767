"""``StochasticWeightAveraging``: average the weights of the last epochs, with a constant (annealed) learning rate.

Lightning's callback (Izmailov et al., "Averaging Weights Leads to Wider Optima and Better Generalization"),
on torch's ``swa_utils``: from the epoch ``swa_epoch_start`` on, an :class:`~torch.optim.swa_utils.AveragedModel`
takes in the weights at the start of every epoch, and :class:`~torch.optim.swa_utils.SWALR` anneals the learning
rate to ``swa_lrs`` in place of the Module's scheduler. When training ends the Module gets the averaged weights;
a model with BatchNorm layers then runs one more epoch of forward passes (no optimizer step changes a weight) to
recompute their statistics for the averaged weights, as Lightning does.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import SWALR, AveragedModel

from core._checks import is_whole
from core._errors import ConfigurationError, CoreWarning
from core.callbacks._callback import Callback
from core.module import StatefulList

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["StochasticWeightAveraging"]

_AVG_FN: TypeAlias = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | int], torch.Tensor]
_ANNEALING = ("cos", "linear")


def _check_settings(
    swa_lrs: object,
    swa_epoch_start: object,
    annealing_epochs: object,
    annealing_strategy: object,
    avg_fn: object,
    device: object,
) -> None:
    start_ok = not isinstance(swa_epoch_start, bool) and (
        (isinstance(swa_epoch_start, int) and swa_epoch_start >= 1)
        or (isinstance(swa_epoch_start, float) and 0.0 <= swa_epoch_start <= 1.0)
    )
    if not start_ok:
        raise ConfigurationError(
            f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start!r}): expected an epoch (int >= 1) or a "
            f"fraction of max_epochs (float in [0, 1])."
        )
    rates = swa_lrs if isinstance(swa_lrs, list) else [swa_lrs]
    if not rates or any(isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0 for rate in rates):
        raise ConfigurationError(
            f"StochasticWeightAveraging(swa_lrs={swa_lrs!r}): expected a positive float, or a list of them (one per "
            f"parameter group)."
        )
    if not is_whole(annealing_epochs, 0):
        raise ConfigurationError(
            f"StochasticWeightAveraging(annealing_epochs={annealing_epochs!r}): expected a whole number >= 0."
        )
    if annealing_strategy not in _ANNEALING:
        raise ConfigurationError(
            f"StochasticWeightAveraging(annealing_strategy={annealing_strategy!r}): expected one of {list(_ANNEALING)}."
        )
    if avg_fn is not None and not callable(avg_fn):
        raise ConfigurationError(f"StochasticWeightAveraging(avg_fn={avg_fn!r}): expected a function or None.")
    if device is not None and not isinstance(device, (torch.device, str)):
        raise ConfigurationError(
            f"StochasticWeightAveraging(device={device!r}): expected a torch.device, a str or None."
        )


class StochasticWeightAveraging(Callback):
    """Average the weights of the epochs from ``swa_epoch_start`` to the last, under an SWA learning rate.

    :param swa_lrs: The learning rate the SWA epochs anneal to: one for every parameter group, or a list with one per
        group.
    :param swa_epoch_start: The first SWA epoch, counted from 1 (int), or a fraction of ``max_epochs`` (float:
        ``int(fraction * max_epochs)``).
    :param annealing_epochs: Epochs over which the rate goes from the optimizer's to ``swa_lrs``.
    :param annealing_strategy: ``"cos"`` or ``"linear"`` annealing.
    :param avg_fn: ``avg_fn(averaged, current, num_averaged) -> averaged``; ``None``: the equal-weight average.
    :param device: Where the averaged model lives (``None``: the Module's device).

    As in Lightning: one optimizer, at most one scheduler (which the SWA scheduler replaces from the first SWA
    epoch); the average takes in the weights at the *start* of each SWA epoch, so the last epoch's updates are not in
    it; with ``max_epochs=-1`` the average is applied whenever training ends. Unlike Lightning, a scheduler stepped
    every ``"step"`` is refused (Lightning warns and swaps it anyway), and the SWA scheduler is stepped by this
    callback at the end of each epoch rather than listed in ``trainer.lr_scheduler_configs``.
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: _AVG_FN | None = None,
        device: torch.device | str | None = torch.device("cpu"),  # noqa: B008 (Lightning's default)
    ) -> None:
        _check_settings(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn
        self._device = device
        self._first_swa_epoch: int | None = None  # swa_epoch_start as an epoch, once max_epochs is known
        self._max_epochs = -1
        self._model_contains_batch_norm = False
        self._average_model: AveragedModel | None = None
        self._initialized = False
        self._swa_scheduler: SWALR | None = None
        self._replaced_scheduler: Any = None  # the Module's scheduler, set aside while SWA's runs
        self._scheduler_state: dict[str, Any] | None = None  # SWALR's, from a checkpoint
        self._latest_update_epoch = -1
        self.momenta: dict[_BatchNorm, float | None] = {}
        self._flags_before: Any = None  # the Trainer's flags before the batch-norm epoch was added
        self._accumulate_before: int | None = None
        self._batch_norm_epoch = False

    @property
    def swa_start(self) -> int:
        """The first SWA epoch, 0-based."""
        if self._first_swa_epoch is None:
            raise ConfigurationError("StochasticWeightAveraging.swa_start is known once fit has started.")
        return max(self._first_swa_epoch - 1, 0)

    @property
    def swa_end(self) -> float:
        """The last SWA epoch, 0-based (infinite with ``max_epochs=-1``)."""
        return math.inf if self._max_epochs == -1 else self._max_epochs - 1

    @property
    def n_averaged(self) -> torch.Tensor | None:
        """How many sets of weights the average holds."""
        return None if self._average_model is None else self._average_model.n_averaged

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(module, _BatchNorm) for module in pl_module.modules())

    @staticmethod
    def avg_fn(
        averaged_model_parameter: torch.Tensor, model_parameter: torch.Tensor, num_averaged: torch.Tensor
    ) -> torch.Tensor:
        """The equal-weight running average (what ``avg_fn=None`` computes)."""
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        """Copy the parameters of ``src_pl_module`` into ``dst_pl_module`` (same architecture)."""
        for source, target in zip(src_pl_module.parameters(), dst_pl_module.parameters(), strict=True):
            target.detach().copy_(source.to(target.device))

    # The run ----------------------------------------------------------------------------------------------------------

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if stage != "fit":
            return
        # A copy made before the strategy moves the Module; moved to `device` when SWA begins. Parameters only: the
        # buffers (BatchNorm statistics) are recomputed for the average at the end.
        self._average_model = AveragedModel(module, avg_fn=self._avg_fn, use_buffers=False)
        self._initialized = False
        self._swa_scheduler = self._replaced_scheduler = self._scheduler_state = None
        self._latest_update_epoch = -1

    def on_fit_start(self, trainer: TrainerView, module: Module) -> None:
        if len(trainer.optimizers) != 1:
            raise ConfigurationError(
                f"StochasticWeightAveraging works with one optimizer; configure_optimizers gave "
                f"{len(trainer.optimizers)}."
            )
        configs = trainer.lr_scheduler_configs
        if len(configs) > 1:
            raise ConfigurationError(
                f"StochasticWeightAveraging replaces one learning-rate scheduler; configure_optimizers gave "
                f"{len(configs)}."
            )
        if configs and configs[0].interval != "epoch":
            raise ConfigurationError(
                f"StochasticWeightAveraging replaces the scheduler at an epoch's start, but "
                f"{type(configs[0].scheduler).__name__} steps every {configs[0].interval!r} and the Trainer would keep "
                f"stepping it; use 'interval': 'epoch'."
            )
        if configs and configs[0].frequency != 1:
            warnings.warn(
                f"StochasticWeightAveraging steps its scheduler every epoch; {type(configs[0].scheduler).__name__} "
                f"stepped every {configs[0].frequency} epochs.",
                CoreWarning,
                stacklevel=2,
            )
        if isinstance(self._swa_epoch_start, float):
            if trainer.max_epochs == -1:
                raise ConfigurationError(
                    f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) is a fraction of max_epochs, "
                    f"but max_epochs=-1; give the first SWA epoch as an int."
                )
            self._first_swa_epoch = int(trainer.max_epochs * self._swa_epoch_start)
        else:
            self._first_swa_epoch = self._swa_epoch_start
        self._max_epochs = trainer.max_epochs
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(module)
        if self._model_contains_batch_norm and self._max_epochs != -1:
            if not module.automatic_optimization:
                raise ConfigurationError(
                    "StochasticWeightAveraging recomputes BatchNorm statistics in an extra epoch in which no "
                    "optimizer step may change a weight; with automatic_optimization=False your steps cannot be "
                    "skipped there. Use automatic optimization, or update the statistics yourself."
                )
            # One more epoch, for the BatchNorm statistics of the averaged weights (Lightning's extra epoch).
            self._flags_before = trainer.config
            trainer.config = attrs.evolve(trainer.config, max_epochs=self._max_epochs + 1)
        if self._scheduler_state is not None:  # resumed after SWA began: SWALR takes over at once
            self._initialize(trainer, module)

    def _initialize(self, trainer: TrainerView, module: Module) -> None:
        self._initialized = True
        averaged = self._averaged()
        averaged.to(self._device if self._device is not None else module.device)
        optimizer = trainer.optimizers[0]
        groups = optimizer.param_groups
        rates = list(self._swa_lrs) if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(groups)
        if len(rates) != len(groups):
            raise ConfigurationError(
                f"StochasticWeightAveraging(swa_lrs={self._swa_lrs!r}) gives {len(rates)} rates for an optimizer with "
                f"{len(groups)} parameter groups."
            )
        restored_rates = [group["lr"] for group in groups]
        for rate, group in zip(rates, groups, strict=True):
            group["initial_lr"] = rate
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=rates,  # type: ignore[arg-type]  # a list, one per group, is accepted
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,  # type: ignore[arg-type]
            last_epoch=trainer.max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
            # Creating SWALR stepped the rates; the optimizer's restored ones are those the resumed run used.
            for rate, group in zip(restored_rates, groups, strict=True):
                group["lr"] = rate
        elif trainer.current_epoch != self.swa_start:
            warnings.warn(
                f"StochasticWeightAveraging starts at epoch {trainer.current_epoch}, after swa_start={self.swa_start}, "
                f"with no saved state: the rate schedule and the average begin here.",
                CoreWarning,
                stacklevel=2,
            )
        configs = trainer.lr_scheduler_configs
        if configs:  # the Trainer stops stepping it; checkpoints still save it (on_save_checkpoint)
            self._replaced_scheduler = configs.pop(0).scheduler

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        epoch = trainer.current_epoch
        in_swa = self.swa_start <= epoch <= self.swa_end
        if in_swa and not self._initialized:
            self._initialize(trainer, module)
        if in_swa and epoch > self._latest_update_epoch:
            self._averaged().update_parameters(module)
            self._latest_update_epoch = epoch
        if self._max_epochs != -1 and epoch == self.swa_end + 1:  # the added epoch: BatchNorm statistics only
            self.transfer_weights(self._averaged().module, module)
            self.reset_batch_norm_and_save_state(module)
            self._batch_norm_epoch = True
            self._accumulate_before = trainer.accumulate_grad_batches
            if math.isfinite(trainer.num_training_batches):  # one optimizer step (a no-op) in the whole epoch
                trainer.accumulate_grad_batches = max(1, int(trainer.num_training_batches))

    def on_before_optimizer_step(self, trainer: TrainerView, module: Module, optimizer: torch.optim.Optimizer) -> None:
        if self._batch_norm_epoch:  # no gradient, no change: the weights stay the average
            optimizer.zero_grad(set_to_none=True)

    def on_train_epoch_end(self, trainer: TrainerView, module: Module) -> None:
        if self._swa_scheduler is not None:
            self._swa_scheduler.step()

    def on_train_end(self, trainer: TrainerView, module: Module) -> None:
        self._restore_flags(trainer)
        finished = trainer.current_epoch - 1  # the last epoch trained
        if self._batch_norm_epoch and finished == self.swa_end + 1:
            if self._accumulate_before is not None:
                trainer.accumulate_grad_batches = self._accumulate_before
            self.reset_momenta()
            self._batch_norm_epoch = False
        elif finished == self.swa_end or self._max_epochs == -1:
            averaged = self._average_model
            if averaged is not None and int(averaged.n_averaged) > 0:
                self.transfer_weights(averaged.module, module)

    def teardown(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self._restore_flags(trainer)  # after an exception, on_train_end did not run
        if self._batch_norm_epoch:
            self.reset_momenta()
            self._batch_norm_epoch = False

    def _restore_flags(self, trainer: TrainerView) -> None:
        if self._flags_before is not None:
            trainer.config = self._flags_before
            self._flags_before = None

    def _averaged(self) -> AveragedModel:
        if self._average_model is None:
            raise ConfigurationError(
                "StochasticWeightAveraging builds its averaged model in setup('fit'), which has not run."
            )
        return self._average_model

    # BatchNorm --------------------------------------------------------------------------------------------------------

    def reset_batch_norm_and_save_state(self, pl_module: nn.Module) -> None:
        """Zero every BatchNorm layer's statistics and make them a plain average over the coming batches (momentum
        ``None``), keeping each layer's momentum to put back (:meth:`reset_momenta`)."""
        self.momenta = {}
        for module in pl_module.modules():
            if not isinstance(module, _BatchNorm) or module.running_mean is None or module.running_var is None:
                continue
            module.running_mean.zero_()
            module.running_var.fill_(1.0)
            if module.num_batches_tracked is not None:
                module.num_batches_tracked.zero_()
            self.momenta[module] = module.momentum
            module.momentum = None  # torch's cumulative moving average

    def reset_momenta(self) -> None:
        for module, momentum in self.momenta.items():
            module.momentum = momentum

    # Checkpoints ------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": 0 if self._average_model is None else int(self._average_model.n_averaged),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        if self._average_model is not None and state_dict["average_model_state"] is not None:
            self._average_model.load_state_dict(state_dict["average_model_state"])

    def on_save_checkpoint(self, trainer: TrainerView, module: Module, checkpoint: dict[str, Any]) -> None:
        # The Trainer restores schedulers before callbacks, into what configure_optimizers gives: so the checkpoint
        # lists the Module's own scheduler (SWALR's state is in this callback's).
        saved = checkpoint.get("lr_schedulers")
        if self._replaced_scheduler is not None and isinstance(saved, StatefulList):
            checkpoint["lr_schedulers"] = StatefulList([self._replaced_scheduler, *saved.items], saved.what)
