"""``DDPShardedStrategy``: FairScale's sharded data parallelism (ZeRO stage 2) on core's ``ParallelStrategy``.

Every rank holds the whole model, as with ``ddp``; what is sharded is the optimizer state and the gradients.
Each optimizer is rebuilt as FairScale's ``OSS`` (here :class:`ShardedOptimizer`): the parameters are split in
``world_size`` parts by size, each rank keeps the optimizer state of its part, steps it, and broadcasts the
updated values to the others. The module is wrapped in ``ShardedDataParallel``, which reduces each gradient to
the rank that owns its parameter (the other ranks then drop it).

The processes, the process group and the collectives are the core's (:class:`ParallelStrategy`); this class adds
the module's and optimizers' set-up (together: ``ShardedDataParallel`` needs the optimizers),
``no_backward_sync``, the agreement on skipping a step under ``16-mixed``, and a clean end.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
import torch.distributed as dist
from fairscale.nn.data_parallel import ShardedDataParallel
from fairscale.optim import OSS

from core import ConfigurationError, CoreWarning, Supports, hookimpl
from core.toolkit.strategies import ParallelOptions, ParallelStrategy, optimizer_step, set_up_part

from ._optimizer import ShardedOptimizer

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from core import ActiveSet

REDUCE_BUFFER_SIZE_MULTI_NODE: Final = 2**23
"""Lightning's default ``reduce_buffer_size`` (8M elements) when the job spans nodes; 0 (no buckets) on one."""

SCALED_PRECISIONS: Final = frozenset({"16-mixed", "16"})
"""Precisions whose loss scaler skips a step on inf/nan gradients: the ranks must agree on skipping."""

UNMAINTAINED: Final = (
    "FairScale has been unmaintained since 2022 (its last release, 0.4.13, dates from January 2023); "
    "strategy='ddp_sharded' is kept for code written for Lightning 1.x. strategy='fsdp' (pip install core-fsdp) "
    "is its successor: it shards the parameters as well as the gradients and the optimizer state."
)


@functools.cache
def warn_unmaintained() -> None:
    """Say once per process that FairScale is unmaintained and what replaces it (when a run selects it)."""
    warnings.warn(UNMAINTAINED, CoreWarning, stacklevel=2)


def _flag(owner: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner}({name}={value!r}): expected True or False.")
    return value


class DDPShardedStrategy(ParallelStrategy):
    """Optimizer state and gradients sharded over the ranks by FairScale (``OSS`` + ``ShardedDataParallel``).

    The options are Lightning 1.x's (``DDPShardedStrategy(**kwargs)`` passed them to ``ShardedDataParallel``):

    :param reduce_buffer_size: Elements per bucket in which small gradients travel together (0: each alone);
        by default 0 on one node and 2**23 across nodes, as Lightning chose.
    :param broadcast_buffers: Broadcast rank 0's buffers (batch-norm statistics) at every forward.
    :param sync_models_at_startup: Broadcast rank 0's parameters at set-up so that every rank starts alike.
    :param reduce_fp16: Reduce gradients in float16 (only without buckets: ``reduce_buffer_size=0``).
    :param auto_refresh_trainable: Notice parameters frozen or unfrozen between steps (costs a check per forward).
    :param warn_on_trainable_params_changed: Log when such a change is noticed.
    :param broadcast_fp16: Let ``OSS`` broadcast the updated parameters in float16; by default only under
        ``16-mixed`` across nodes, as Lightning chose.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name`` (:class:`core.toolkit.strategies.ParallelOptions`). ``start_method="popen"`` (the
        default) is ``ddp_sharded``: the script runs again as the other ranks; ``"spawn"``, ``"fork"`` or
        ``"forkserver"`` is ``ddp_sharded_spawn`` (``torch.multiprocessing``), the name when none is given.

    Gradient clipping: each rank holds the gradients of its own parameters only, so clip with the optimizer's
    ``clip_grad_norm(max_norm)`` (FairScale's, which combines the ranks' norms), not ``Lite.clip_gradients``.
    """

    message_prefix: ClassVar[str] = "core-fairscale"
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "checkpoint_io": {"distributed"}},
        hint="FairScale runs on CPUs (gloo) and CUDA GPUs; rank 0 writes the whole checkpoint as one file, so use "
             "the 'torch' or 'async' checkpoint_io. For sharded checkpoints and parameters use strategy='fsdp' "
             "(pip install core-fsdp), FairScale's successor.",
    )

    def __init__(
        self,
        reduce_buffer_size: int | None = None,
        broadcast_buffers: bool = True,
        sync_models_at_startup: bool = True,
        reduce_fp16: bool = False,
        auto_refresh_trainable: bool = True,
        warn_on_trainable_params_changed: bool = True,
        broadcast_fp16: bool | None = None,
        **options: Unpack[ParallelOptions],
    ) -> None:
        spawned = options.get("start_method", "popen") != "popen"
        options["name"] = options.get("name") or ("ddp_sharded_spawn" if spawned else "ddp_sharded")
        super().__init__(**options)
        owner = type(self).__name__
        if reduce_buffer_size is not None and (
            isinstance(reduce_buffer_size, bool) or not isinstance(reduce_buffer_size, int) or reduce_buffer_size < 0
        ):
            raise ConfigurationError(
                f"{owner}(reduce_buffer_size={reduce_buffer_size!r}): expected a whole number of elements >= 0 "
                f"(0: no buckets), or None for Lightning's default (0 on one node, 2**23 across nodes)."
            )
        if reduce_fp16 and reduce_buffer_size:
            raise ConfigurationError(
                f"{owner}(reduce_fp16=True, reduce_buffer_size={reduce_buffer_size}): FairScale reduces in float16 "
                f"only without buckets; pass reduce_buffer_size=0."
            )
        self.reduce_buffer_size = reduce_buffer_size
        self.broadcast_buffers = _flag(owner, "broadcast_buffers", broadcast_buffers)
        self.sync_models_at_startup = _flag(owner, "sync_models_at_startup", sync_models_at_startup)
        self.reduce_fp16 = _flag(owner, "reduce_fp16", reduce_fp16)
        self.auto_refresh_trainable = _flag(owner, "auto_refresh_trainable", auto_refresh_trainable)
        self.warn_on_trainable_params_changed = _flag(
            owner, "warn_on_trainable_params_changed", warn_on_trainable_params_changed
        )
        self.broadcast_fp16 = None if broadcast_fp16 is None else _flag(owner, "broadcast_fp16", broadcast_fp16)
        self._wrapped: list[ShardedDataParallel] = []
        self._optimizers: list[OSS] = []

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_wrapped", None)  # the run's objects stay behind; a spawned rank makes its own
        state.pop("_optimizers", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._wrapped = []
        self._optimizers = []

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, start_method={self.start_method!r}, timeout={self.timeout}, "
            f"reduce_buffer_size={self.reduce_buffer_size!r})"
        )

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        # Selected for a run (Lite, Trainer, resolve): the one place a user learns that FairScale is unmaintained.
        # Not in __init__: listing, --check and the compatibility matrix build the object without using it.
        warn_unmaintained()
        super().core_attach(active)

    @property
    def sharded_optimizers(self) -> tuple[OSS, ...]:
        """The ``OSS`` optimizers set up in the current run, in order (empty outside a run)."""
        return tuple(self._optimizers)

    # -- model and optimizers -------------------------------------------------------------------------

    def _sharded_data_parallel_options(self) -> dict[str, Any]:
        buffer = self.reduce_buffer_size
        if buffer is None:
            buffer = REDUCE_BUFFER_SIZE_MULTI_NODE if self.active.config.num_nodes > 1 else 0
        return {
            "broadcast_buffers": self.broadcast_buffers,
            "sync_models_at_startup": self.sync_models_at_startup,
            "reduce_buffer_size": buffer,
            "reduce_fp16": self.reduce_fp16,
            "auto_refresh_trainable": self.auto_refresh_trainable,
            "warn_on_trainable_params_changed": self.warn_on_trainable_params_changed,
        }

    def _shard(self, optimizer: torch.optim.Optimizer) -> OSS:
        """``optimizer`` rebuilt as an ``OSS`` over the same parameter groups (the original keeps no state)."""
        if isinstance(optimizer, OSS):
            return optimizer
        if optimizer.state:
            raise ConfigurationError(
                f"strategy={self.alias!r} rebuilds each optimizer as FairScale's OSS, which would drop the state this "
                f"{type(optimizer).__name__} already holds; set it up before its first step, and restore a checkpoint "
                f"through Lite.load after setup."
            )
        sharded = ShardedOptimizer(optimizer.param_groups, optim=type(optimizer), **optimizer.defaults)
        fp16 = self.broadcast_fp16
        if fp16 is None:
            fp16 = self.active.config.precision in SCALED_PRECISIONS and self.active.config.num_nodes > 1
        sharded.broadcast_fp16 = fp16
        sharded._clear_cache()  # buckets are rebuilt at the first step, on the parameters' device (as Lightning)
        if self.active.config.precision in SCALED_PRECISIONS and not any(
            group["params"] for group in sharded.optim.param_groups
        ):
            raise ConfigurationError(
                f"precision={self.active.config.precision!r} with strategy={self.alias!r} needs every rank to own a "
                f"parameter (rank {self.active.cluster.global_rank} of {self.active.cluster.world_size} owns none of "
                f"the {sum(len(group['params']) for group in optimizer.param_groups)}): use fewer processes or "
                f"precision='bf16-mixed'."
            )
        return sharded

    @hookimpl
    def strategy_setup_module_and_optimizers(
        self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]
    ) -> tuple[torch.nn.Module, list[Any]]:
        sharded = [self._shard(optimizer) for optimizer in optimizers]
        wrapped = self.communicator.call(
            "broadcast of the initial parameters (ShardedDataParallel)",
            ShardedDataParallel,
            module,
            sharded_optimizer=sharded,
            **self._sharded_data_parallel_options(),
        )
        self._wrapped.append(wrapped)
        self._optimizers.extend(sharded)
        return wrapped, list(sharded)

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """A module set up without optimizers (evaluation): rank 0's values everywhere, nothing to reduce."""
        if self.sync_models_at_startup and self.active.cluster.world_size > 1:
            with torch.no_grad(), self.communicator.guard("broadcast of the initial parameters (ddp_sharded)"):
                for tensor in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(tensor, src=0)
        return module

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        raise ConfigurationError(
            f"strategy={self.alias!r} sets up a module and its optimizers together (ShardedDataParallel reduces each "
            f"gradient to the rank whose OSS shard owns it): call lite.setup(model, optimizer) instead of "
            f"setup_module() then setup_optimizers()."
        )

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        context: AbstractContextManager[None] = set_up_part(module, ShardedDataParallel, self.alias).no_sync()
        return context

    # -- steps ----------------------------------------------------------------------------------------

    @hookimpl
    def strategy_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        """Step through the precision; under a loss scaler, first make every rank see an overflow any rank saw.

        A scaler skips the step when this rank's gradients hold inf or nan. Here each rank holds only the
        gradients it owns, and ``OSS.step`` ends with a broadcast from every rank: ranks that disagree on skipping
        would wait for each other until the timeout. This is what FairScale's ``ShardedGradScaler`` adds to torch's
        scaler (an all-reduce of the overflow flag); the scaler itself belongs to the precision plugin, so the
        agreement is made here: a rank whose own gradients are finite while another's are not marks one of its
        gradients nan, and every rank's scaler then skips the step and lowers its scale alike.
        """
        if self.active.config.precision not in SCALED_PRECISIONS or not isinstance(optimizer, OSS):
            return optimizer_step(self.active, optimizer, **kwargs)
        step_kwargs = dict(kwargs)
        closure = step_kwargs.pop("closure", None)
        closure_result = closure() if closure is not None else None  # its backward fills the gradients first
        self._agree_on_overflow(optimizer)
        step_result = optimizer_step(self.active, optimizer, **step_kwargs)
        return closure_result if closure is not None else step_result

    def _agree_on_overflow(self, optimizer: OSS) -> None:
        owned = [parameter for group in optimizer.optim.param_groups for parameter in group["params"]]
        gradients = [parameter.grad for parameter in owned if parameter.grad is not None]
        local = any(not bool(torch.isfinite(gradient).all()) for gradient in gradients)
        device = owned[0].device if owned else torch.device("cpu")
        flag = torch.tensor([1.0 if local else 0.0], device=device)
        anywhere = bool(self.communicator.reduce(flag, None, "max").item())
        if anywhere and not local and owned:
            first = owned[0]
            if first.grad is None:
                first.grad = torch.full_like(first, float("nan"))
            else:
                first.grad.view(-1)[0] = float("nan")

    # -- end of the run -------------------------------------------------------------------------------

    def after_process_group(self) -> None:
        """Drop the destroyed process group from the wrappers and optimizers the user may still hold.

        Held there, it would be freed during interpreter shutdown, where gloo's threads can abort the process.
        The wrapper is finished with, as ``ddp``'s is: its ``.module`` and its ``state_dict()`` keep working. An
        optimizer takes the world group of the next run it is used in (:meth:`ShardedOptimizer.adopt_process_group`).
        """
        for wrapped in self._wrapped:
            wrapped.__dict__.pop("_process_group", None)
        for optimizer in self._optimizers:
            optimizer.__dict__.pop("group", None)

    def forget_run(self) -> None:
        self._wrapped = []
        self._optimizers = []
        super().forget_run()
