"""``SingleDeviceStrategy``: one process, one device; the base of every strategy class in the toolkit.

Its checkpoint and collective hooks are the single-process reference that the process-group strategies
(:class:`core.toolkit.strategies.ParallelStrategy` and the plugins built on it) extend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import torch

from core._errors import ConfigurationError
from core._markers import hookimpl
from core.toolkit._empty_init import EmptyInit

from ._activations import ActivationCheckpointingPolicy, check_activation_checkpointing_policy, checkpoint_activations

if TYPE_CHECKING:
    from core.registry._active import ActiveSet

REDUCE_OPS: Final = ("sum", "mean", "max", "min")


def check_reduce_op(reduce_op: str) -> str:
    """Return ``reduce_op`` lower-cased, or raise naming the four accepted operations."""
    op = str(reduce_op).lower()
    if op not in REDUCE_OPS:
        raise ConfigurationError(f"Unknown reduce_op={reduce_op!r}; expected one of {list(REDUCE_OPS)}.")
    return op


class SingleDeviceStrategy:
    """Runs the function in this process on the accelerator's device.

    :param activation_checkpointing_policy: Which submodules recompute their activations in backward instead of
        keeping them (module classes, a function ``module -> bool``, or :class:`EveryNth`); applied at set-up with
        torch's composable checkpoint, state-dict keys unchanged (:func:`checkpoint_activations`).
    """

    kind: Final = "strategy"
    name: ClassVar[str] = "single_device"
    max_processes: ClassVar[int | None] = 1

    def __init__(self, *, activation_checkpointing_policy: ActivationCheckpointingPolicy = None) -> None:
        self._active: ActiveSet | None = None
        self.activation_checkpointing_policy = check_activation_checkpointing_policy(
            type(self).__name__, activation_checkpointing_policy
        )

    def checkpoint_activations(self, module: torch.nn.Module) -> list[torch.nn.Module]:
        """Apply :attr:`activation_checkpointing_policy` to ``module`` (before wrapping, sharding or compiling it);
        returns the checkpointed submodules. A subclass that sets modules up in its own hook calls it first."""
        return checkpoint_activations(module, self.activation_checkpointing_policy, type(self).__name__)

    @property
    def active(self) -> ActiveSet:
        """The run's active set (its config, cluster, device and the other plugins' hooks), from ``core_attach``."""
        if self._active is None:
            raise ConfigurationError(f"The strategy {self.name!r} is used before it was resolved into a run.")
        return self._active

    @property
    def precision(self) -> object:
        """The run's precision plugin (Lightning's ``strategy.precision``)."""
        return self.active.precision

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return function(*args, **kwargs)

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self.checkpoint_activations(module)
        return module

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    @hookimpl
    def strategy_reduce(self, tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
        check_reduce_op(reduce_op)
        return tensor

    @hookimpl
    def strategy_all_gather(self, tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
        return tensor.unsqueeze(0)

    @hookimpl
    def strategy_broadcast(self, obj: Any, src: int) -> Any:
        if src != 0:
            raise ConfigurationError(f"broadcast(src={src}) names a rank outside a world of size 1.")
        return obj

    @hookimpl
    def strategy_barrier(self, name: str | None) -> None:
        return None

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        return nullcontext()

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        return None

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> AbstractContextManager[Any]:
        # Parameters are created straight on the device. empty_init skips torch.nn.init (uninitialised memory, no
        # random numbers drawn), as Lightning's Strategy.module_init_context does for one device and for DDP.
        return _on_device(self.active.device or torch.device("cpu"), EmptyInit(enabled=empty_init))

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        if self.active.cluster.is_global_zero:
            self.active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        self.active.hook.strategy_barrier(name="save_checkpoint")

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        return self.active.hook.checkpoint_io_load(path=path, map_location="cpu", weights_only=weights_only)


_Part = TypeVar("_Part")


def set_up_part(module: torch.nn.Module, kind: type[_Part], alias: str, needed_by: str = "no_backward_sync") -> _Part:
    """The first submodule of ``module`` (itself included) that is a ``kind``: what the strategy ``alias`` made of
    it at set-up (a ``DistributedDataParallel`` wrapper, a ``fully_shard`` unit).

    A module without one was not set up by that strategy: a :class:`core.ConfigurationError` says that
    ``needed_by`` (the call that needs it) wants the module ``setup()`` returned.
    """
    found = next((sub for sub in module.modules() if isinstance(sub, kind)), None)
    if found is None:
        raise ConfigurationError(
            f"{needed_by} needs a module set up by the {alias!r} strategy, but {type(module).__name__} is not wrapped "
            f"in {kind.__name__} and holds none; pass the module that setup() / setup_module() returned."
        )
    return found


@contextmanager
def _on_device(device: torch.device, empty_init: EmptyInit) -> Iterator[None]:
    with device, empty_init:
        yield
