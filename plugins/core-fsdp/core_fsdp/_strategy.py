"""``FSDPStrategy``: every rank holds a shard of each parameter, gradient and optimizer state (FSDP2).

The processes, the process group, the launcher and the collectives are the core's (this class extends
:class:`core.toolkit.strategies.ParallelStrategy`); what it adds is the model's set-up:
:func:`torch.distributed.fsdp.fully_shard` turns its parameters into ``DTensor`` shards over a one-dimensional
device mesh of all ranks. The order of set-up, in :meth:`FSDPStrategy.setup_module`:

1. unless the model was created empty (``Lite.init_module(empty_init=True)``: on the meta device), rank 0's
   initial values are broadcast, so every rank shards the same model (as ``DistributedDataParallel`` does);
2. the auto-wrap policy picks inner units and ``fully_shard`` is applied innermost first, the root last;
3. a model created empty is materialised: only this rank's shards are allocated, then initialised;
4. a load hook is installed, so that ``load_state_dict`` accepts whole tensors and keeps this rank's slice.

After the run the module stays sharded, as in Lightning: its parameters stay ``DTensor`` s, each rank holding its
shards only (a unit a forward left gathered is resharded at teardown), and the process group is kept while it lives
(:class:`core.toolkit.strategies.ShardedModules`). It computes as it is (inference, ``Trainer.test`` after
``Trainer.fit``: the next run adopts the group and finds the module already sharded, so it does not shard it
again), a module created empty included. Making it whole is explicit: :func:`core.toolkit.strategies.full_state_dict`
(also ``core_fsdp.full_state_dict``) gathers one tensor at a time, to rank 0's CPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from itertools import chain
from typing import Any, ClassVar, Final

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.strategies import (
    SHARDED_MODULES,
    ParallelStrategy,
    ReplacedParameters,
    accept_whole_optimizer_state,
    accept_whole_tensors,
    gather_full_state,
)

from ._wrap import AutoWrapPolicy, predicate, shard

STATE_DICT_TYPES: Final = ("sharded", "full")

MIXED_PARAMETER_DTYPES: Final = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16}
"""Precisions (by canonical name) whose compute dtype FSDP casts the gathered parameters to."""

_SCALED_PRECISIONS: Final = frozenset({"16-mixed", "16"})
_SINGLE_FILE_IO: Final = frozenset({"torch", "async"})


def _supports(state_dict_type: str) -> Supports:
    never: dict[str, set[str]] = {"accelerator": {"tpu", "mps"}, "precision": set(_SCALED_PRECISIONS)}
    if state_dict_type == "sharded":
        never["checkpoint_io"] = set(_SINGLE_FILE_IO)
    return Supports(
        never=never,
        hint="fsdp keeps gradients sharded, which 16-mixed's loss scaler cannot check for infs across ranks: use "
             "precision='bf16-mixed'. Sharded checkpoints are written by every rank: keep the default "
             "checkpoint_io 'distributed' (pip install core-dcp), or pass FSDPStrategy(state_dict_type='full') to "
             "gather a single file on rank 0 for 'torch' / 'async'. On TPUs use strategy='xla'.",
    )


class FSDPStrategy(ParallelStrategy):
    """Fully sharded data parallel training with FSDP2.

    :param auto_wrap_policy: Which submodules become their own unit: a collection of module classes, a
        minimum number of parameters per unit, a function ``module -> bool``, or ``None`` (the root only).
    :param reshard_after_forward: Free the gathered parameters after each unit's forward (and gather them
        again for backward): less memory, more communication.
    :param cpu_offload: Keep the sharded parameters, gradients and optimizer state in CPU memory.
    :param mixed_precision: A ``MixedPrecisionPolicy``; by default derived from the run's precision
        (``bf16-mixed`` computes with bfloat16 parameters and reduces gradients in float32).
    :param state_dict_type: ``"sharded"``: every rank writes its shards (through the ``distributed``
        checkpoint_io, the default then); ``"full"``: the shards are gathered and rank 0 writes one file.
    :param sync_module_states: Broadcast rank 0's initial parameters before sharding (not needed, and
        skipped, for a model created with ``empty_init=True``).
    :param process_group_backend: ``"gloo"``, ``"nccl"``, ...; by default the accelerator's choice.
    :param timeout: How long a collective may wait for the other ranks before failing.
    :param start_method: How missing processes are started, as for ``ddp``.
    :param name: The alias reported in messages.
    """

    message_prefix: ClassVar[str] = "core-fsdp"

    def __init__(
        self,
        auto_wrap_policy: AutoWrapPolicy = None,
        reshard_after_forward: bool | int = True,
        cpu_offload: bool = False,
        mixed_precision: MixedPrecisionPolicy | None = None,
        state_dict_type: str = "sharded",
        sync_module_states: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | float = timedelta(minutes=30),
        start_method: str = "popen",
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(
            process_group_backend=process_group_backend, timeout=timeout, start_method=start_method,
            name=name or "fsdp",
        )
        if state_dict_type not in STATE_DICT_TYPES:
            raise ConfigurationError(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}) is not a checkpoint layout; expected one of "
                f"{list(STATE_DICT_TYPES)}."
            )
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecisionPolicy):
            raise ConfigurationError(
                f"FSDPStrategy(mixed_precision={mixed_precision!r}): expected a "
                f"torch.distributed.fsdp.MixedPrecisionPolicy, or None to follow the run's precision."
            )
        predicate(auto_wrap_policy)  # refuses a malformed policy now rather than at setup
        self.auto_wrap_policy = auto_wrap_policy
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.mixed_precision = mixed_precision
        self.state_dict_type = state_dict_type
        self.sync_module_states = sync_module_states
        self.supports = _supports(state_dict_type)  # per object: depends on the layout
        self._replaced = ReplacedParameters()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_replaced", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._replaced = ReplacedParameters()

    @property
    def default_checkpoint_io(self) -> str:
        """``distributed`` for sharded checkpoints, ``torch`` for a full one."""
        return "distributed" if self.state_dict_type == "sharded" else "torch"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, auto_wrap_policy={self.auto_wrap_policy!r}, "
            f"reshard_after_forward={self.reshard_after_forward}, cpu_offload={self.cpu_offload}, "
            f"state_dict_type={self.state_dict_type!r})"
        )

    @property
    def mesh(self) -> DeviceMesh:
        """The one-dimensional mesh of every rank, on the accelerator's device type."""
        if self._mesh is None:
            device = self.active.device or torch.device("cpu")
            self._mesh = init_device_mesh(device.type, (self.active.cluster.world_size,))
        return self._mesh

    def _fully_shard_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "mesh": self.mesh,
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": self._mixed_precision(),
        }
        if self.cpu_offload:
            device = self.active.device or torch.device("cpu")
            options["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
        return options

    def _mixed_precision(self) -> MixedPrecisionPolicy:
        if self.mixed_precision is not None:
            return self.mixed_precision
        dtype = MIXED_PARAMETER_DTYPES.get(self.active.config.precision)
        if dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    # -- model ----------------------------------------------------------------------------------------

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> AbstractContextManager[Any]:
        # On the meta device a module has shapes and no storage; setup allocates only this rank's shards.
        if empty_init:
            return torch.device("meta")
        return self.active.device or torch.device("cpu")

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Broadcast rank 0's values (unless created empty), shard, materialise, accept whole tensors on load.

        A module an earlier run in these processes left sharded is taken as it is (its group was kept)."""
        earlier = SHARDED_MODULES.adopt(module)
        if earlier is not None:
            return earlier
        tensors = list(chain(module.parameters(), module.buffers()))
        empty = any(tensor.is_meta for tensor in tensors)
        if empty and not all(tensor.is_meta for tensor in tensors):
            raise ConfigurationError(
                "The module has some parameters on the meta device and some not; create it entirely inside "
                "lite.init_module(empty_init=True), or entirely outside."
            )
        if not empty and self.sync_module_states and self.active.cluster.world_size > 1:
            self._broadcast_from_rank_zero(tensors)
        originals = dict(module.named_parameters())
        shard(module, self.auto_wrap_policy, self._fully_shard_options())
        if empty:
            self._materialise(module)
        self._replaced.record(originals, module)
        accept_whole_tensors(module)
        return module

    @hookimpl
    def strategy_compile(self, module: torch.nn.Module) -> torch.nn.Module | None:
        """Compile each sharded block in place (torch's recommendation for FSDP2), the root's own layers eager.

        Without blocks (no ``auto_wrap_policy``) Lite compiles the whole module."""
        blocks = [block for block in module.modules() if block is not module and isinstance(block, FSDPModule)]
        if not blocks:
            return None
        for block in blocks:
            block.compile()
        return module

    def _broadcast_from_rank_zero(self, tensors: list[torch.Tensor]) -> None:
        with torch.no_grad(), self.communicator.guard("broadcast of the initial parameters (fsdp)"):
            for tensor in tensors:
                dist.broadcast(tensor, src=0)

    def _materialise(self, module: torch.nn.Module) -> None:
        """Allocate this rank's shards of a module created on the meta device and initialise them."""
        module.to_empty(device=self.active.device or torch.device("cpu"))
        with torch.no_grad(), warnings.catch_warnings():
            # Each rank initialises its own shards; the values are meant to be replaced by a checkpoint.
            warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
            for submodule in module.modules():
                reset = getattr(submodule, "reset_parameters", None)
                if callable(reset):
                    reset()

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Point an optimizer made before set-up at the sharded parameters that replaced the originals."""
        self._replaced.point_optimizer(optimizer, self.alias)
        accept_whole_optimizer_state(optimizer)
        return optimizer

    # -- end of the run -------------------------------------------------------------------------------

    def release_run(self) -> None:
        """Reshard every unit a forward left gathered (``reshard_after_forward=False``, an evaluation): the modules
        leave the run holding their shards only. Nothing is gathered: see :func:`full_state_dict` for that."""
        for module in self.set_up_modules:
            for unit in module.modules():
                if isinstance(unit, FSDPModule):
                    unit.reshard()

    def forget_run(self) -> None:
        """Forget which parameter replaced which (the base class drops the run's mesh and modules)."""
        self._replaced.clear()
        super().forget_run()

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        root = next((sub for sub in module.modules() if isinstance(sub, FSDPModule)), None)
        if root is None:
            raise ConfigurationError(
                f"no_backward_sync needs a module set up by the {self.alias!r} strategy, but "
                f"{type(module).__name__} holds no fully_shard unit; pass the module that setup() returned."
            )
        return _without_gradient_sync(root)

    # -- checkpoints ----------------------------------------------------------------------------------

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        active = self.active
        if self.state_dict_type == "full":
            whole = gather_full_state(state)  # every rank takes part in gathering; rank 0 writes
            if active.cluster.is_global_zero:
                active.hook.checkpoint_io_save(checkpoint=whole, path=path, storage_options=None)
        else:
            if not getattr(active.checkpoint_io, "writes_shards", False):
                raise ConfigurationError(
                    f"FSDPStrategy(state_dict_type='sharded') has every rank write its shards, which the "
                    f"checkpoint_io {active.config.checkpoint_io!r} cannot do. Use plugins=['distributed'] "
                    f"(pip install core-dcp) or FSDPStrategy(state_dict_type='full')."
                )
            active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        active.hook.strategy_barrier(name="save_checkpoint")

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        # Every rank reads whole tensors (any layout, any world size that wrote it); the load hooks installed
        # at set-up keep this rank's slices when the module and optimizers load them.
        loaded: dict[str, Any] = self.active.hook.checkpoint_io_load(
            path=path, map_location="cpu", weights_only=weights_only
        )
        return loaded


@contextmanager
def _without_gradient_sync(root: FSDPModule) -> Iterator[None]:
    root.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)
