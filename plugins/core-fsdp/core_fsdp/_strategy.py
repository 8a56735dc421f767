"""``FSDPStrategy``: every rank holds a shard of each parameter, gradient and optimizer state (FSDP2).

The processes, the process group, the launcher and the collectives are the core's (this class extends
:class:`core.toolkit.strategies.ShardedStrategy`, which also gives empty-init, optimizers pointed at the shards,
sharded or gathered checkpoints and the resharding at the end of the run); what it adds is the model's set-up:
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

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.strategies import (
    DATA_PARALLEL,
    REPLICATE,
    SHARDED_MODULES,
    ParallelDims,
    ParallelOptions,
    ShardedStrategy,
    accept_whole_tensors,
    set_up_part,
    without_replicate,
)

from ._lightning import (
    IGNORED,
    REFUSED,
    activation_checkpointing_policy_of,
    check_device_mesh,
    cpu_offload_of,
    mixed_precision_of,
    sharding_of,
)
from ._wrap import AutoWrapPolicy, predicate, shard

if TYPE_CHECKING:
    from typing_extensions import Unpack

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


class FSDPStrategy(ShardedStrategy):
    """Fully sharded data parallel training with FSDP2.

    :param auto_wrap_policy: Which submodules become their own unit: a collection of module classes, a
        minimum number of parameters per unit, a function ``module -> bool``, or ``None`` (the root only).
    :param reshard_after_forward: Free the gathered parameters after each unit's forward (and gather them
        again for backward): less memory, more communication.
    :param cpu_offload: Keep the sharded parameters, gradients and optimizer state in CPU memory (FSDP1's
        ``CPUOffload(offload_params=True)``, as Lightning takes it, means the same).
    :param mixed_precision: A ``MixedPrecisionPolicy`` (FSDP1's ``MixedPrecision`` is converted: its
        ``param_dtype`` and ``reduce_dtype``); by default derived from the run's precision (``bf16-mixed`` computes
        with bfloat16 parameters and reduces gradients in float32; another precision names its dtype through
        ``precision_sharded_parameter_dtype``, and without it parameters keep theirs).
    :param state_dict_type: ``"sharded"``: every rank writes its shards (through the ``distributed``
        checkpoint_io, the default then); ``"full"``: the shards are gathered and rank 0 writes one file.
    :param sync_module_states: Broadcast rank 0's initial parameters before sharding (not needed, and
        skipped, for a model created with ``empty_init=True``).
    :param sharding_strategy: Lightning's name for how much is sharded: ``"FULL_SHARD"`` (the default: as
        ``reshard_after_forward`` says), ``"SHARD_GRAD_OP"`` (``reshard_after_forward=False``), ``"HYBRID_SHARD"``
        (sharded within a group of ranks, replicated across groups: a 2-D mesh, see ``device_mesh``),
        ``"_HYBRID_SHARD_ZERO2"`` (both); ``"NO_SHARD"`` is refused (that is ``strategy="ddp"``). FSDP1's
        ``ShardingStrategy`` members are taken too.
    :param device_mesh: With ``HYBRID_SHARD``, the layout ``(replicas, shards)``; by default the nodes are the
        replicas and each node's devices shard (``(num_nodes, devices)``).
    :param activation_checkpointing: Lightning's deprecated spelling of ``activation_checkpointing_policy``: a
        module class or a list of them.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name``, ``activation_checkpointing_policy`` (which submodules recompute their activations
        in backward, applied before sharding; :class:`core.toolkit.strategies.ParallelOptions`). Lightning's FSDP1
        keywords without an FSDP2 meaning (``limit_all_gathers``, ``use_orig_params``, ``forward_prefetch``,
        ``backward_prefetch``, ``device_id``) are taken with a one-time note; ``param_init_fn``,
        ``ignored_modules``, ``ignored_states``, ``process_group`` and the run's parts (``accelerator``,
        ``precision``, ...) are refused by name with what to write instead (docs/memory.md lists them all).
    """

    message_prefix: ClassVar[str] = "core-fsdp"
    default_alias: ClassVar[str] = "fsdp"
    supports_outer_replicas: ClassVar[bool] = True
    sharded_checkpoint_option = "state_dict_type='sharded'"
    full_checkpoint_option = "state_dict_type='full'"
    refused_arguments = REFUSED
    ignored_arguments = IGNORED

    def __init__(
        self,
        auto_wrap_policy: AutoWrapPolicy = None,
        reshard_after_forward: bool | int = True,
        cpu_offload: bool | Any = False,
        mixed_precision: MixedPrecisionPolicy | Any | None = None,
        state_dict_type: str = "sharded",
        sync_module_states: bool = True,
        sharding_strategy: Any = "FULL_SHARD",
        device_mesh: tuple[int, int] | None = None,
        activation_checkpointing: type[torch.nn.Module] | list[type[torch.nn.Module]] | None = None,
        **options: Unpack[ParallelOptions],
    ) -> None:
        owner = type(self).__name__
        options["activation_checkpointing_policy"] = activation_checkpointing_policy_of(
            owner, activation_checkpointing, options.get("activation_checkpointing_policy"))
        reshard_after_forward, self.hybrid = sharding_of(owner, sharding_strategy, reshard_after_forward)
        self.hybrid_shape = check_device_mesh(owner, device_mesh, self.hybrid)
        """``(replicas, shards)`` of ``HYBRID_SHARD`` as given, or ``None`` (nodes x devices)."""
        cpu_offload = cpu_offload_of(cpu_offload)
        mixed_precision = mixed_precision_of(owner, mixed_precision)
        super().__init__(sharded_checkpoint=state_dict_type == "sharded", **options)
        if state_dict_type not in STATE_DICT_TYPES:
            raise ConfigurationError(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}) is not a checkpoint layout; expected one of "
                f"{list(STATE_DICT_TYPES)}."
            )
        predicate(auto_wrap_policy)  # refuses a malformed policy now rather than at setup
        self.auto_wrap_policy = auto_wrap_policy
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.mixed_precision = mixed_precision
        self.state_dict_type = state_dict_type
        self.sync_module_states = sync_module_states
        self.supports = _supports(state_dict_type)  # per object: depends on the layout

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, auto_wrap_policy={self.auto_wrap_policy!r}, "
            f"reshard_after_forward={self.reshard_after_forward}, cpu_offload={self.cpu_offload}, "
            f"state_dict_type={self.state_dict_type!r})"
        )

    @property
    def mesh(self) -> DeviceMesh:
        """The one-dimensional mesh ``data_parallel`` the parameters are sharded over, on the accelerator's device
        type: every rank, or this copy's ranks when the strategy runs as copies side by side
        (:meth:`replicate_outside`). A sub-mesh of the run's :attr:`world_mesh`."""
        return without_replicate(self.world_mesh)

    def make_parallel_dims(self, devices_per_node: int, num_nodes: int) -> ParallelDims:
        """Every rank on one ``data_parallel`` dimension (``(replicate, data_parallel)`` with copies side by side).

        With ``sharding_strategy="HYBRID_SHARD"``, the 2-D ``(replicate, data_parallel)`` of ``device_mesh`` (by
        default the nodes x each node's devices): ``fully_shard`` over the whole of it shards within
        ``data_parallel`` and all-reduces the gradients across ``replicate`` every step (HSDP), so these replicas are
        synchronised by FSDP itself, unlike copies side by side, which the strategy then refuses."""
        world_size = devices_per_node * num_nodes
        if self.hybrid:
            replicas, shards = self.hybrid_shape or (num_nodes, devices_per_node)
            return ParallelDims(world_size, replicate_size=replicas, data_parallel_size=shards,
                                always=[REPLICATE, DATA_PARALLEL], layout=f"device_mesh=({replicas}, {shards})",
                                owner="FSDPStrategy(sharding_strategy='HYBRID_SHARD')")
        return ParallelDims(world_size, data_parallel_size=world_size, always=[DATA_PARALLEL], owner="FSDPStrategy")

    def _fully_shard_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "mesh": self.world_mesh if self.hybrid else self.mesh,
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
        if dtype is None:  # another precision says what it computes in (float8's bf16), else the stored dtype
            dtype = self.active.hook.precision_sharded_parameter_dtype()
        if dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    # -- model ----------------------------------------------------------------------------------------

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
            self.broadcast_from_rank_zero(tensors)
        originals = dict(module.named_parameters())
        shard(module, self.auto_wrap_policy, self._fully_shard_options())
        if empty:
            self.materialise(module)
        self.replaced.record(originals, module)
        accept_whole_tensors(module)
        return module

    @hookimpl
    def strategy_compile(
        self, module: torch.nn.Module, compile_in_place: Callable[[torch.nn.Module], None]
    ) -> torch.nn.Module | None:
        """Compile each sharded block in place (torch's recommendation for FSDP2) with the user's compile settings,
        the root's own layers eager.

        Without blocks (no ``auto_wrap_policy``) Lite compiles the whole module."""
        blocks = [block for block in module.modules() if block is not module and isinstance(block, FSDPModule)]
        if not blocks:
            return None
        for block in blocks:
            compile_in_place(block)
        return module

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        return _without_gradient_sync(set_up_part(module, FSDPModule, self.alias))


@contextmanager
def _without_gradient_sync(root: FSDPModule) -> Iterator[None]:
    root.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)
