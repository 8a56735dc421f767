"""``BaseFinetuning`` and ``BackboneFinetuning``: freeze parts of the model, and unfreeze them later in training.

Lightning's callbacks. :meth:`BaseFinetuning.freeze_before_training` runs in ``setup``, before
``configure_optimizers``, so the Module builds its optimizer over the trainable parameters only; at the start of
every epoch :meth:`BaseFinetuning.finetune_function` may unfreeze modules and add their parameters to the optimizer
as a new parameter group (:meth:`BaseFinetuning.unfreeze_and_add_param_group`).

A checkpoint records the optimizers' group layout by parameter name and which parameters were trainable, so that
``fit(ckpt_path=...)`` after an unfreeze rebuilds the groups the saved optimizer state belongs to and trains the
unfrozen parameters again.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from core._errors import CheckpointError, ConfigurationError, CoreWarning
from core.callbacks._callback import Callback
from core.module._optimizers import parse_optimizers

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["BackboneFinetuning", "BaseFinetuning", "multiplicative"]

log = logging.getLogger(__name__)

Modules: TypeAlias = "nn.Module | Iterable[Modules]"
"""A module, or an iterable of modules (nested), as the static methods accept them."""


def multiplicative(epoch: int) -> float:
    """BackboneFinetuning's default ``lambda_func``: double the backbone's rate every epoch."""
    return 2.0


def _group_layout(groups: list[dict[str, Any]], names: dict[nn.Parameter, str]) -> list[dict[str, Any]]:
    """Parameter groups with each parameter replaced by its name (the other settings kept)."""
    return [
        {
            **{key: value for key, value in group.items() if key != "params"},
            "params": [names[param] for param in group["params"]],
        }
        for group in groups
    ]


class BaseFinetuning(Callback):
    """Subclass it: freeze in :meth:`freeze_before_training`, unfreeze in :meth:`finetune_function`.

    Build the optimizer over the trainable parameters only
    (``torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()))``); the parameters unfrozen later
    join it as new parameter groups.
    """

    def __init__(self) -> None:
        # Per optimizer index, its parameter groups with parameter names instead of parameters.
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        self._trainable: list[str] | None = None  # parameter names with requires_grad, from a checkpoint
        self._frozen_batch_norms: list[str] = []  # BatchNorm modules not tracking statistics, from a checkpoint
        self._held_back: dict[int, dict[str, Any]] = {}  # optimizer states that await their groups (by id)
        self._load_hooks: list[Any] = []
        self._watching: tuple[Module, Callable[[], Any], Any] | None = None
        self._module: Module | None = None  # the Module of the running fit, whose trainable names are saved

    # What subclasses write --------------------------------------------------------------------------------------------

    def freeze_before_training(self, pl_module: Module) -> None:
        """Freeze what must not train at first; called in ``setup``, before ``configure_optimizers``."""
        raise NotImplementedError(f"{type(self).__name__} must override freeze_before_training(pl_module).")

    def finetune_function(self, pl_module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze what should train from ``epoch`` on; called at the start of every epoch, per optimizer."""
        raise NotImplementedError(
            f"{type(self).__name__} must override finetune_function(pl_module, epoch, optimizer)."
        )

    # Freezing and unfreezing ------------------------------------------------------------------------------------------

    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules of ``modules``, and the others that hold parameters of their own."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        found: Iterable[nn.Module]
        if isinstance(modules, nn.Module):
            found = modules.modules()
        else:
            found = [leaf for item in modules for leaf in BaseFinetuning.flatten_modules(item)]
        return [module for module in found if not list(module.children()) or module._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (BatchNorm's skipped unless
        ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):  # each parameter once, from the module that owns it
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze every parameter of ``modules``; BatchNorm layers track their statistics again."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze the parameters ``module`` holds itself; a BatchNorm layer stops tracking statistics."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze every parameter of ``modules``; with ``train_bn`` their BatchNorm layers stay trainable."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """``params`` without those ``optimizer`` holds already, with a warning when there are some.

        A parameter is the same parameter (identity): Lightning compares values, which also drops a different
        parameter that happens to hold equal values (two zero-initialised biases).
        """
        held = {id(param) for group in optimizer.param_groups for param in group["params"]}
        given = list(params)
        kept = [param for param in given if id(param) not in held]
        if len(kept) < len(given):
            warnings.warn(
                f"{len(given) - len(kept)} of the parameters to add are in the optimizer already and are skipped "
                f"(BatchNorm layers kept trainable by freeze(train_bn=True) are; other parameters are when the "
                f"optimizer was built over all of them, not filter(lambda p: p.requires_grad, self.parameters())).",
                CoreWarning,
                stacklevel=3,
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: torch.optim.Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new group.

        :param lr: The group's learning rate; ``None``: the first group's divided by ``initial_denom_lr``.
        :param train_bn: Add the BatchNorm parameters too.
        """
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denominator = initial_denom_lr if lr is None else 1.0
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr / denominator})

    # The run ----------------------------------------------------------------------------------------------------------

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self.freeze_before_training(module)
        if stage == "fit":
            self._module = module
            self._watch_optimizer_loads(module)

    def _watch_optimizer_loads(self, module: Module) -> None:
        """Make the optimizers ``configure_optimizers`` returns hand a checkpoint's state to this callback when
        its groups differ from theirs (groups added by an unfreeze before the checkpoint was saved).

        The Trainer restores the optimizers before the callbacks' state, so their groups cannot be rebuilt first
        (Lightning restores callbacks first): the state is held back and loaded in ``on_fit_start``, after the
        groups are rebuilt. The Module's ``configure_optimizers`` is wrapped for its one call in this fit.
        """
        before = module.__dict__.get("configure_optimizers")
        configure = module.configure_optimizers

        def configure_and_watch() -> Any:
            self._stop_watching()
            returned = configure()
            self._load_hooks.extend(
                optimizer.register_load_state_dict_pre_hook(self._hold_back_other_layouts)
                for optimizer in parse_optimizers(returned)[0]
            )
            return returned

        module.configure_optimizers = configure_and_watch  # type: ignore[method-assign]
        self._watching = (module, configure_and_watch, before)

    def _stop_watching(self) -> None:
        if self._watching is None:
            return
        module, wrapper, before = self._watching
        self._watching = None
        if module.__dict__.get("configure_optimizers") is wrapper:
            if before is None:
                del module.__dict__["configure_optimizers"]
            else:
                module.__dict__["configure_optimizers"] = before

    def _hold_back_other_layouts(
        self, optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]
    ) -> dict[str, Any] | None:
        if len(state_dict.get("param_groups", ())) == len(optimizer.param_groups):
            return None
        self._held_back[id(optimizer)] = state_dict
        return optimizer.state_dict()  # load what it has: nothing changes until on_fit_start

    def on_fit_start(self, trainer: TrainerView, module: Module) -> None:
        if not self._restarting and not self._held_back:
            return
        self._restarting = False
        named = dict(module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            inner = getattr(optimizer, "optimizer", optimizer)
            held = self._held_back.pop(id(inner), None)
            if held is None:
                continue  # the saved groups matched the optimizer's: restored as they were
            layout = self._internal_optimizer_metadata.get(index)
            if layout is None or len(layout) != len(held["param_groups"]):
                raise CheckpointError(
                    f"The checkpoint's optimizer {index} has {len(held['param_groups'])} parameter groups, this one "
                    f"{len(optimizer.param_groups)}, and the checkpoint holds no {type(self).__name__} state saying "
                    f"which parameters the others hold; resume with the callbacks the checkpoint was saved with "
                    f"(the same class: its state is stored under its class name)."
                )
            optimizer.param_groups = [
                {**group, "params": [named[name] for name in group["params"]]} for group in layout
            ]
            optimizer.load_state_dict(held)
        if self._trainable is not None:  # freeze_before_training froze again what had been unfrozen
            trainable = set(self._trainable)
            for name, param in named.items():
                param.requires_grad = name in trainable
            frozen = set(self._frozen_batch_norms)
            for name, submodule in module.named_modules():
                if isinstance(submodule, _BatchNorm):
                    submodule.track_running_stats = name not in frozen

    def on_train_epoch_start(self, trainer: TrainerView, module: Module) -> None:
        names = {param: name for name, param in module.named_parameters()}
        for index, optimizer in enumerate(trainer.optimizers):
            groups_before = len(optimizer.param_groups)
            self.finetune_function(module, trainer.current_epoch, optimizer)
            groups = optimizer.param_groups
            if index not in self._internal_optimizer_metadata:
                self._internal_optimizer_metadata[index] = _group_layout(groups, names)
            elif len(groups) != groups_before:
                self._internal_optimizer_metadata[index].extend(_group_layout(groups[groups_before:], names))

    def teardown(self, trainer: TrainerView, module: Module, stage: str) -> None:
        self._stop_watching()
        for handle in self._load_hooks:
            handle.remove()
        self._load_hooks = []
        self._held_back = {}
        self._module = None

    # Checkpoints ------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        module = self._module
        state: dict[str, Any] = {"internal_optimizer_metadata": self._internal_optimizer_metadata}
        if module is not None:
            state["trainable"] = [name for name, param in module.named_parameters() if param.requires_grad]
            state["frozen_batch_norms"] = [
                name
                for name, submodule in module.named_modules()
                if isinstance(submodule, _BatchNorm) and not submodule.track_running_stats
            ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]
        self._trainable = state_dict.get("trainable")
        self._frozen_batch_norms = state_dict.get("frozen_batch_norms", [])


class BackboneFinetuning(BaseFinetuning):
    """Train ``module.backbone`` from epoch ``unfreeze_backbone_at_epoch`` on, at a learning rate that grows by
    ``lambda_func(epoch + 1)`` every epoch until it reaches the rest of the model's (with ``should_align``).

    The Module must have an ``nn.Module`` attribute ``backbone``; its optimizer's first group is the reference rate.

    :param unfreeze_backbone_at_epoch: The epoch (0-based) whose start unfreezes the backbone.
    :param lambda_func: The factor applied to the backbone's rate at the start of each later epoch.
    :param backbone_initial_ratio_lr: The backbone's first rate as a fraction of the first group's.
    :param backbone_initial_lr: The backbone's first rate, instead of the ratio.
    :param should_align: Once the backbone's rate would pass the first group's, use the first group's.
    :param initial_denom_lr: Passed on to :meth:`unfreeze_and_add_param_group` (used only without a rate).
    :param train_bn: Add the backbone's BatchNorm parameters to its group when unfreezing. While the backbone is
        frozen its BatchNorm layers stay trainable (Lightning freezes with ``train_bn=True`` whatever this says).
    :param verbose: Log both rates at every epoch start (``logging``, at INFO).
    :param rounding: Digits of the rates in that log.
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if not isinstance(getattr(module, "backbone", None), nn.Module):
            raise ConfigurationError(
                f"BackboneFinetuning trains `module.backbone`, but {type(module).__name__} has no nn.Module attribute "
                f"`backbone`."
            )
        super().setup(trainer, module, stage)

    def freeze_before_training(self, pl_module: Module) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        else:
            return
        self.previous_backbone_lr = backbone_lr
        if self.verbose:
            log.info(
                f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(backbone_lr, self.rounding)}"
            )
