"""``DDPStrategy``: one process per device, gradients averaged by ``DistributedDataParallel``.

Processes, the process group and the collectives are the core's :class:`core.toolkit.strategies.ParallelStrategy`;
this class adds the model's wrapper (with ``sync_batchnorm`` and DistributedDataParallel's options) and
``no_backward_sync``.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, ClassVar, Final

import torch

# Imported before any process group exists, on purpose: this module's functions take ``group=group.WORLD``
# as a default argument, so importing it later (DistributedDataParallel does, lazily) would hold the
# world group forever and free it only during interpreter shutdown, where gloo aborts the process.
import torch.distributed.nn.functional
from torch.nn.parallel import DistributedDataParallel

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.strategies import ActivationCheckpointingPolicy, ParallelStrategy, set_up_part

_SET_BY_THE_STRATEGY: Final = frozenset({"self", "module", "device_ids", "output_device", "process_group"})
_DDP_ARGUMENTS: Final = frozenset(inspect.signature(DistributedDataParallel.__init__).parameters) - _SET_BY_THE_STRATEGY
"""``DistributedDataParallel``'s own keyword arguments that ``DDPStrategy(**kwargs)`` passes on, as Lightning's does."""
_COMM_HOOKS: Final = (
    "communication hooks are extensions here: plugins=['powersgd'] (pip install core-powersgd) for PowerSGD, or an "
    "extension whose strategy_configure_ddp wrapper calls register_comm_hook on the wrapped module "
    "(docs/plugin-authors.md)"
)


class DDPStrategy(ParallelStrategy):
    """Data-parallel training: every process holds the whole model and averages gradients with the others.

    :param find_unused_parameters: Let ``DistributedDataParallel`` tolerate parameters that get no
        gradient in a step (costs a graph traversal per step).
    :param static_graph: Promise that the set of used parameters never changes (enables optimisations).
    :param gradient_as_bucket_view: Let gradients alias the communication buckets (saves memory).
    :param bucket_cap_mb: Size of a gradient bucket in MiB (``DistributedDataParallel``'s default if ``None``).
    :param process_group_backend: ``"gloo"``, ``"nccl"``, ...; by default the accelerator's choice.
    :param timeout: How long a collective may wait for the other ranks before failing.
    :param start_method: ``"popen"`` (run the script again as the other ranks), ``"spawn"``, ``"fork"`` or
        ``"forkserver"`` (start the ranks with ``torch.multiprocessing`` and return rank 0's result).
    :param sync_batchnorm: Convert batch-norm layers to ``SyncBatchNorm`` before wrapping.
    :param name: The alias reported in messages; derived from ``start_method`` when not given.
    :param activation_checkpointing_policy: Which submodules recompute their activations in backward (module
        classes, a function ``module -> bool``, ``EveryNth``); applied before wrapping
        (:func:`core.toolkit.strategies.checkpoint_activations`).
    :param other_arguments: Any other keyword argument of ``DistributedDataParallel`` (``broadcast_buffers``,
        ``init_sync``, ...) is passed on to it, as Lightning's ``DDPStrategy(**kwargs)`` does.
        Lightning's ``ddp_comm_hook`` / ``ddp_comm_state`` / ``ddp_comm_wrapper`` / ``model_averaging_period`` and
        the run's parts (``accelerator``, ``precision``, ...) are refused by name with what to use instead.
    """

    message_prefix: ClassVar[str] = "core-ddp"
    refused_arguments: ClassVar[Mapping[str, str]] = {
        **ParallelStrategy.refused_arguments,
        "ddp_comm_hook": _COMM_HOOKS,
        "ddp_comm_state": _COMM_HOOKS,
        "ddp_comm_wrapper": _COMM_HOOKS,
        "model_averaging_period": "post-local SGD model averaging has no strategy option here; periodic averaging "
                                  "of independent copies is core-diloco's extension (plugins=['diloco'])",
        "device_ids": "the strategy passes DistributedDataParallel the run's device",
        "output_device": "the strategy passes DistributedDataParallel the run's device",
        "process_group": "the strategy uses the run's process group",
    }
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}},
        hint="On TPUs use strategy='xla' (pip install core-tpu); an MPS machine has a single device, so use "
             "strategy='single_device'.",
    )

    def __init__(
        self,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
        bucket_cap_mb: float | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float = timedelta(minutes=30),
        start_method: str = "popen",
        sync_batchnorm: bool = False,
        *,
        name: str | None = None,
        activation_checkpointing_policy: ActivationCheckpointingPolicy = None,
        **other_arguments: Any,
    ) -> None:
        self.ddp_kwargs = {key: value for key, value in other_arguments.items() if key in _DDP_ARGUMENTS}
        """Other keyword arguments of ``DistributedDataParallel``, passed on as they are."""
        super().__init__(
            process_group_backend=process_group_backend, timeout=timeout, start_method=start_method,
            name=name or ("ddp" if start_method == "popen" else f"ddp_{start_method}"),
            activation_checkpointing_policy=activation_checkpointing_policy,
            **{key: value for key, value in other_arguments.items() if key not in _DDP_ARGUMENTS},
        )
        if bucket_cap_mb is not None and bucket_cap_mb <= 0:
            raise ConfigurationError(f"DDPStrategy(bucket_cap_mb={bucket_cap_mb!r}) must be positive or None.")
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_cap_mb = bucket_cap_mb
        self.sync_batchnorm = sync_batchnorm
        self._wrappers: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_wrappers", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._wrappers = weakref.WeakSet()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, start_method={self.start_method!r}, "
            f"timeout={self.timeout}, find_unused_parameters={self.find_unused_parameters}, "
            f"static_graph={self.static_graph})"
        )

    def after_process_group(self) -> None:
        """Let the destroyed process group be freed now, while the interpreter is fully alive.

        A ``DistributedDataParallel`` the user still holds keeps the group alive through its reducer; the
        group would then be freed during interpreter shutdown, where gloo's worker threads can abort the
        process ("terminate called without an active exception"). The wrapper is finished with anyway:
        its ``.module`` and its ``state_dict()`` keep working.
        """
        for wrapper in list(self._wrappers):
            for attribute in ("logger", "reducer", "process_group"):
                wrapper.__dict__.pop(attribute, None)
        self._wrappers.clear()

    # -- model ----------------------------------------------------------------------------------------

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Convert batch norms if asked, then wrap through the ``strategy_configure_ddp`` hook (extensions wrap it)."""
        if self.sync_batchnorm:
            module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        device = next((parameter.device for parameter in module.parameters()), torch.device("cpu"))
        device_ids = None if device.type == "cpu" else [device.index or 0]
        wrapped: torch.nn.Module = self.active.hook.strategy_configure_ddp(module=module, device_ids=device_ids)
        self._wrappers.update(sub for sub in wrapped.modules() if isinstance(sub, DistributedDataParallel))
        return wrapped

    @hookimpl
    def strategy_configure_ddp(self, module: torch.nn.Module, device_ids: Sequence[int] | None) -> torch.nn.Module:
        options: dict[str, Any] = {
            **self.ddp_kwargs,
            "find_unused_parameters": self.find_unused_parameters,
            "static_graph": self.static_graph,
            "gradient_as_bucket_view": self.gradient_as_bucket_view,
        }
        if self.bucket_cap_mb is not None:
            options["bucket_cap_mb"] = self.bucket_cap_mb
        return self.communicator.call(
            "broadcast of the initial parameters (DistributedDataParallel)",
            DistributedDataParallel,
            module,
            device_ids=list(device_ids) if device_ids is not None else None,
            **options,
        )

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        return set_up_part(module, DistributedDataParallel, self.alias).no_sync()
