"""The hooks ``Lite`` calls, each bound once per active set, with Lite's default for optional ones.

Binding happens when the active set is attached (at construction, or in a process that received the
``Lite`` by pickling), never per step: a bound hook is the single implementation's own method where
:meth:`core.ActiveSet.bind` can skip pluggy's dispatch, or Lite's default below when no plugin
implements an optional hook. Every hook is called with keyword arguments.

The defaults make the smallest valid plugins work (see ``REQUIRED_HOOKS`` in ``core/hookspecs.py``):
the strategy's backward and optimizer step fall back to the precision's, which fall back to plain
PyTorch; conversions are the identity; contexts are null; teardowns do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from core.registry._active import ActiveSet

Hook = Callable[..., Any]


def _identity(data: Any) -> Any:
    return data


def _null_context(**_: Any) -> AbstractContextManager[None]:
    return nullcontext()


def _nothing(**_: Any) -> None:
    return None


def _plain_backward(tensor: torch.Tensor, module: torch.nn.Module | None) -> bool:
    tensor.backward()
    return True


def _plain_optimizer_step(optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
    return optimizer.step(**kwargs)


def _same_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    return optimizer


def _empty_state() -> dict[str, Any]:
    return {}


class BoundHooks:
    """One attribute per hook Lite calls, named after the hook."""

    __slots__ = (
        "accelerator_setup_device",
        "accelerator_teardown",
        "checkpoint_io_teardown",
        "environment_teardown",
        "precision_autocast",
        "precision_backward",
        "precision_convert_input",
        "precision_convert_module",
        "precision_convert_output",
        "precision_load_state_dict",
        "precision_module_materialized",
        "precision_module_state_to_load",
        "precision_module_state_to_save",
        "precision_optimizer_step",
        "precision_state_dict",
        "precision_tensor_init_context",
        "precision_unscale_gradients",
        "strategy_all_gather",
        "strategy_backward",
        "strategy_barrier",
        "strategy_block_backward_sync",
        "strategy_broadcast",
        "strategy_clip_gradients",
        "strategy_compile",
        "strategy_distributed_sampler_kwargs",
        "strategy_launch",
        "strategy_load_checkpoint",
        "strategy_load_state",
        "strategy_module_init_context",
        "strategy_optimizer_step",
        "strategy_reduce",
        "strategy_save_checkpoint",
        "strategy_save_state",
        "strategy_setup_environment",
        "strategy_setup_module",
        "strategy_setup_module_and_optimizers",
        "strategy_setup_optimizer",
        "strategy_teardown",
    )

    def __init__(self, active: ActiveSet) -> None:
        bind = active.bind
        # Required hooks: resolution refused any plugin that lacks them.
        self.accelerator_setup_device: Hook = bind("accelerator_setup_device")
        self.strategy_launch: Hook = bind("strategy_launch")
        self.strategy_setup_module: Hook = bind("strategy_setup_module")
        self.strategy_reduce: Hook = bind("strategy_reduce")
        self.strategy_all_gather: Hook = bind("strategy_all_gather")
        self.strategy_broadcast: Hook = bind("strategy_broadcast")
        self.strategy_barrier: Hook = bind("strategy_barrier")

        self.precision_convert_module: Hook = bind("precision_convert_module", default=lambda module: module)
        self.precision_convert_input: Hook = bind("precision_convert_input", default=_identity)
        self.precision_convert_output: Hook = bind("precision_convert_output", default=_identity)
        self.precision_autocast: Hook = bind("precision_autocast", default=_null_context)
        self.precision_tensor_init_context: Hook = bind("precision_tensor_init_context", default=_null_context)
        self.precision_unscale_gradients: Hook = bind("precision_unscale_gradients", default=_nothing)
        self.precision_state_dict: Hook = bind("precision_state_dict", default=_empty_state)
        self.precision_load_state_dict: Hook = bind("precision_load_state_dict", default=_nothing)
        self.precision_backward: Hook = bind("precision_backward", default=_plain_backward)
        self.precision_optimizer_step: Hook = bind("precision_optimizer_step", default=_plain_optimizer_step)
        # Structural precisions only (optional): None keeps the state as it is.
        self.precision_module_materialized: Hook = bind("precision_module_materialized", default=_nothing)
        self.precision_module_state_to_save: Hook = bind("precision_module_state_to_save", default=_nothing)
        self.precision_module_state_to_load: Hook = bind("precision_module_state_to_load", default=_nothing)

        # A strategy without its own backward / step delegates to the precision, as the contract says.
        self.strategy_backward: Hook = bind("strategy_backward", default=self.precision_backward)
        self.strategy_optimizer_step: Hook = bind("strategy_optimizer_step", default=self.precision_optimizer_step)
        self.strategy_setup_optimizer: Hook = bind("strategy_setup_optimizer", default=_same_optimizer)
        self.strategy_setup_environment: Hook = bind("strategy_setup_environment", default=_nothing)
        self.strategy_block_backward_sync: Hook = bind("strategy_block_backward_sync", default=_null_context)
        self.strategy_distributed_sampler_kwargs: Hook = bind("strategy_distributed_sampler_kwargs", default=_nothing)
        self.strategy_module_init_context: Hook = bind(
            "strategy_module_init_context", default=lambda empty_init: active.device or nullcontext()
        )
        self.strategy_save_checkpoint: Hook = bind("strategy_save_checkpoint", default=_default_save(active))
        self.strategy_load_checkpoint: Hook = bind("strategy_load_checkpoint", default=_default_load(active))
        # Optional hooks of strategies that own an engine (DeepSpeed); None sends Lite down the usual path.
        self.strategy_setup_module_and_optimizers: Hook = bind("strategy_setup_module_and_optimizers", default=_nothing)
        self.strategy_save_state: Hook = bind("strategy_save_state", default=_nothing)
        self.strategy_compile: Hook = bind("strategy_compile", default=_nothing)
        self.strategy_clip_gradients: Hook = bind("strategy_clip_gradients", default=_nothing)
        self.strategy_load_state: Hook = bind("strategy_load_state", default=_nothing)

        self.strategy_teardown: Hook = bind("strategy_teardown", default=_nothing)
        self.checkpoint_io_teardown: Hook = bind("checkpoint_io_teardown", default=_nothing)
        self.accelerator_teardown: Hook = bind("accelerator_teardown", default=_nothing)
        self.environment_teardown: Hook = bind("environment_teardown", default=_nothing)


def _default_save(active: ActiveSet) -> Hook:
    """Global rank 0 writes through the checkpoint_io, then every rank waits for it."""

    def save(path: str, state: dict[str, Any]) -> None:
        if active.cluster.is_global_zero:
            active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        active.hook.strategy_barrier(name="save_checkpoint")

    return save


def _default_load(active: ActiveSet) -> Hook:
    """Every rank reads the whole file onto the CPU; ``load_state_dict`` then copies to the device."""

    def load(path: str, weights_only: bool) -> dict[str, Any]:
        result: dict[str, Any] = active.hook.checkpoint_io_load(
            path=path, map_location="cpu", weights_only=weights_only
        )
        return result

    return load
