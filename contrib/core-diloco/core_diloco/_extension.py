"""``DiLoCoExtension``: DiLoCo around the strategy of each group, with ``wrapper=True`` hooks only.

The processes form a device mesh whose outermost dimension is ``replicate``: the rest is a group that trains with
the run's strategy over its own ranks, the ``replicate`` dimension joins each rank with its counterparts in the other
groups, and only the outer synchronisation crosses it. The mesh is the core's
:class:`core.toolkit.strategies.ParallelDims`. Inside a group:

- ``ddp`` (and its spawn/fork variants): the strategy's ``DistributedDataParallel`` moved onto the group's process
  group (DDP has no notion of copies side by side); the extension lays out ``replicate x data_parallel`` itself,
  since ddp has no mesh;
- ``fsdp``, ``model_parallel`` (any strategy whose ``supports_outer_replicas`` is true): the strategy itself runs
  as copies side by side (``ParallelStrategy.replicate_outside``), sharding and parallelizing over its group's
  ranks only; the extension reads the strategy's mesh (``ParallelStrategy.parallel_dims``) rather than building
  the same layout again.

Hooks and what each adds:

- ``strategy_setup_environment``: ask a sharded strategy for copies side by side before it builds its mesh; then
  take the strategy's mesh, or build ``replicate x data_parallel`` under ddp, once the world's process group
  exists.
- ``strategy_configure_ddp`` (ddp): let the strategy wrap the module (its DDP broadcasts rank 0's parameters to
  every rank, so all groups start equal), then wrap the same module again over the ``inner`` group only. (fsdp and
  model_parallel broadcast rank 0's parameters to every rank before sharding.)
- ``strategy_setup_optimizer``: give the optimizer an :class:`OuterSync`, driven by its step hooks.
- ``strategy_save_state`` / ``strategy_save_checkpoint`` / ``strategy_load_checkpoint``: finish a synchronisation
  in flight; keep every group's state in the checkpoint (their parameters and inner optimizers differ between
  synchronisations) and give each group its own back on load. Global rank 0's group is the checkpoint itself, the
  others ride along under ``"diloco_groups"``: gathered to rank 0 where one rank writes (ddp, a gathered sharded
  state), written by each rank for its own shards under that key where every rank writes (a sharded checkpoint).
- ``strategy_teardown``: finish what is in flight, unhook, and drop the mesh's groups.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Final

import attrs
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from core import ActiveSet, CheckpointError, ConfigurationError, hookimpl
from core.toolkit import check_whole
from core.toolkit.strategies import (
    DATA_PARALLEL,
    REPLICATE,
    ParallelDims,
    ParallelStrategy,
    ShardedStrategy,
    failing,
    gather_full_state,
)
from core.toolkit.tensors import named_tensors

from ._options import DiLoCoOptions, OuterOptimizerFactory
from ._sync import OuterSync, Traffic

CHECKPOINT_KEY: Final = "diloco_groups"
"""The checkpoint entry holding the other groups' states (the writing rank's group is the checkpoint itself)."""


class DiLoCoExtension:
    """DiLoCo (arXiv 2311.08105) and Streaming DiLoCo (arXiv 2501.18512) over a DDP-family strategy.

    :param replicas: How many groups train apart (the mesh's ``replicate`` size); the world size must be a
        multiple of it. Default: one group per node on several nodes, else one group per process.
    :param sync_every: ``H``, inner steps between synchronisations of a fragment (see :class:`DiLoCoOptions`).
    :param outer_optimizer: ``"nesterov"`` (default), ``"sgd"`` or a callable ``params -> Optimizer``.
    :param outer_lr: Outer learning rate (default 0.7, the paper's).
    :param outer_momentum: Outer momentum (default 0.9, the paper's).
    :param fragments: Streaming DiLoCo's number of fragments (1: plain DiLoCo).
    :param compression: ``"none"``, ``"bf16"`` or ``"int8"`` for the pseudo-gradient between groups.
    :param overlap: Apply a synchronisation one step after sending it (default: only when streaming).

    The options are read when an optimizer is set up: ``extension.options = attrs.evolve(extension.options, ...)``
    changes them for the optimizers set up afterwards.
    """

    kind: Final = "extension"
    name: Final = "diloco"
    contract_version: Final = 1

    def __init__(
        self,
        replicas: int | None = None,
        sync_every: int = 500,
        outer_optimizer: str | OuterOptimizerFactory = "nesterov",
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        fragments: int = 1,
        compression: str = "none",
        overlap: bool | None = None,
    ) -> None:
        self.replicas = None if replicas is None else check_whole("DiLoCoExtension", "replicas", replicas, 1)
        self.options = DiLoCoOptions(
            sync_every=sync_every, outer_optimizer=outer_optimizer, outer_lr=outer_lr,
            outer_momentum=outer_momentum, fragments=fragments, compression=compression, overlap=overlap,
        )
        self.traffic = Traffic()
        """Bytes and collectives this rank sent to the other groups (the outer synchronisations only)."""
        self.syncs: list[OuterSync] = []
        self.dims: ParallelDims | None = None
        """The run's layout, ``replicate`` outermost: the strategy's own (fsdp, model_parallel), or the extension's
        ``replicate x data_parallel`` under ddp; built once the process group exists, dropped at teardown."""
        self.active: ActiveSet | None = None
        self.copies: ParallelStrategy | None = None
        """The strategy running as copies side by side (fsdp, model_parallel); ``None`` under ddp."""

    def __repr__(self) -> str:
        return f"DiLoCoExtension(replicas={self.replicas}, {attrs.asdict(self.options)})"

    def __getstate__(self) -> dict[str, Any]:
        # Spawned ranks get the options; the run's mesh and outer state are made in each rank.
        return {"replicas": self.replicas, "options": self.options, "traffic": Traffic(), "syncs": [],
                "dims": None, "active": None, "copies": None}

    # -- the mesh -----------------------------------------------------------------------------------------

    @property
    def mesh(self) -> Any:
        """The run's ``DeviceMesh`` (``replicate`` outermost), or ``None`` outside a run."""
        return self.dims.world_mesh if self.dims is not None else None

    @property
    def replica_group(self) -> Any:
        """This rank's process group across the groups (the mesh's ``replicate`` dimension)."""
        return self._dims().group(REPLICATE)

    @property
    def inner_group(self) -> Any:
        """This rank's own group: every dimension of the mesh but ``replicate``, flattened."""
        dims = self._dims()
        return dims.group(*(name for name in dims.names if name != REPLICATE))

    @property
    def replica_index(self) -> int:
        """Which group this rank belongs to (0 to ``replicas - 1``)."""
        return self._coordinates()[REPLICATE]

    def _dims(self) -> ParallelDims:
        if self.dims is None:
            raise ConfigurationError(
                "The diloco extension has no device mesh yet: it is built when the strategy sets up the process "
                "group (inside Lite.launch / the Trainer's run)."
            )
        return self.dims

    def _coordinates(self) -> dict[str, int]:
        return self._dims().coordinates(dist.get_rank())

    def _first_of_group(self) -> bool:
        """Whether this rank is the first of its group (0 along every dimension but ``replicate``)."""
        return not any(index for name, index in self._coordinates().items() if name != REPLICATE)

    def _layout(self, world_size: int) -> tuple[int, int]:
        replicas = self.replicas
        if replicas is None:
            nodes = self.active.config.num_nodes if self.active is not None else 1
            replicas = nodes if nodes > 1 else world_size
        if world_size % replicas:
            raise ConfigurationError(
                f"DiLoCoExtension(replicas={replicas}) does not divide the {world_size} processes of this run into "
                f"equal groups; pass a replicas that divides {world_size} (the mesh is replicas x processes per "
                f"group)."
            )
        return replicas, world_size // replicas

    # -- hooks --------------------------------------------------------------------------------------------

    @hookimpl(tryfirst=True)
    def core_attach(self, active: ActiveSet) -> None:
        # First: a strategy running as copies checks its sizes against one copy's ranks in its own core_attach.
        self.active = active
        strategy = active.strategy
        if isinstance(strategy, ParallelStrategy) and strategy.supports_outer_replicas:
            self.copies = strategy
            config = active.config
            strategy.replicate_outside(self._layout(config.devices_per_node * config.num_nodes)[0])
            return
        self.copies = None
        wraps_ddp = any(
            not (impl.wrapper or impl.hookwrapper) for impl in active.hook.strategy_configure_ddp.get_hookimpls()
        )
        if not wraps_ddp:
            raise ConfigurationError(
                f"The diloco extension runs the strategy inside each group of processes, but the strategy "
                f"{active.config.strategy!r} neither wraps modules in DistributedDataParallel (strategy_configure_ddp) "
                f"nor can run as copies side by side (ParallelStrategy.supports_outer_replicas). Use strategy='ddp' "
                f"(or ddp_spawn / ddp_fork), 'fsdp' or 'model_parallel'."
            )

    @hookimpl(wrapper=True)
    def strategy_setup_environment(self) -> Generator[None, None, None]:
        if self.copies is not None and self.active is not None:
            # Before the strategy builds its mesh: it shards and reduces within a group only.
            self.copies.replicate_outside(self._layout(self.active.cluster.world_size)[0])
        result = yield
        if self.copies is not None:
            self.dims = self.copies.parallel_dims  # the strategy built it, replicate outermost
        elif dist.is_available() and dist.is_initialized():
            replicas, inner = self._layout(dist.get_world_size())
            device = self.active.device if self.active is not None else None
            device_type = device.type if isinstance(device, torch.device) else "cpu"
            dims = ParallelDims(replicas * inner, replicate_size=replicas, data_parallel_size=inner,
                                always=[REPLICATE, DATA_PARALLEL], owner="DiLoCoExtension")
            dims.build(device_type)
            self.dims = dims
        return result

    @hookimpl(wrapper=True)
    def strategy_configure_ddp(
        self, module: torch.nn.Module, device_ids: Sequence[int] | None
    ) -> Generator[None, torch.nn.Module, torch.nn.Module]:
        world_wrapped = yield
        if not isinstance(world_wrapped, DistributedDataParallel):
            raise ConfigurationError(
                f"The diloco extension moves DistributedDataParallel onto each group's process group, but "
                f"strategy_configure_ddp returned a {type(world_wrapped).__name__}. Use it with a strategy built on "
                f"torch's DistributedDataParallel."
            )
        options = {
            "find_unused_parameters": world_wrapped.find_unused_parameters,
            "gradient_as_bucket_view": world_wrapped.gradient_as_bucket_view,
            "static_graph": bool(getattr(world_wrapped, "static_graph", False)),
            "bucket_cap_mb": world_wrapped.bucket_bytes_cap / 2**20,
        }
        # The world-wide wrapper did its one job (rank 0's parameters on every rank); its reducer goes with it.
        for attribute in ("logger", "reducer", "process_group"):
            world_wrapped.__dict__.pop(attribute, None)
        del world_wrapped
        return DistributedDataParallel(
            module, device_ids=list(device_ids) if device_ids is not None else None,
            process_group=self.inner_group, **options,
        )

    @hookimpl(wrapper=True)
    def strategy_setup_optimizer(
        self, optimizer: torch.optim.Optimizer
    ) -> Generator[None, torch.optim.Optimizer | None, torch.optim.Optimizer | None]:
        prepared = yield
        target = prepared if prepared is not None else optimizer
        parameters = [parameter for group in target.param_groups for parameter in group["params"]]
        sync = OuterSync(parameters, self.options, self.replica_group, self.traffic)
        sync.attach(target)
        self.syncs.append(sync)
        return prepared

    @hookimpl(wrapper=True)
    def strategy_save_state(self) -> Generator[None, Any, Any]:
        # Called first by Lite.save: land every synchronisation in flight before any state dict is taken.
        for sync in self.syncs:
            sync.finish()
        return (yield)

    @hookimpl(wrapper=True)
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> Generator[None, None, None]:
        if self.dims is None or self.dims.replicate_size == 1:
            return (yield)
        mine = {key: value for key, value in state.items() if key != CHECKPOINT_KEY}
        if isinstance(self.copies, ShardedStrategy) and self.copies.sharded_checkpoint and _holds_dtensors(mine):
            # Every rank writes its own shards: group 0 as the checkpoint itself, every other group under its key
            # (the same layout as a gathered checkpoint, without gathering).
            index = self.replica_index
            state.clear()
            if index == 0:
                state.update(mine, **{CHECKPOINT_KEY: {"group": 0}})
            else:
                state[CHECKPOINT_KEY] = {"group": 0, "groups": {str(index): mine}}
            try:
                return (yield)
            finally:
                state.clear()
                state.update(mine)
        if _holds_dtensors(mine):
            # One rank writes whole tensors: each group gathers its own (every rank takes part), then its first rank
            # sends it on. The strategy gathers the writing group's state once more as it saves.
            mine = gather_full_state(mine)
        if self._first_of_group():
            # Between synchronisations each group has its own parameters and inner optimizer state. Global rank 0
            # writes (the ddp family's rule): its group is the checkpoint itself, and the first rank of every other
            # group sends it its state to ride along under CHECKPOINT_KEY. The other ranks of a group hold the
            # same state as its first and take no part.
            writer = self.replica_index == 0
            everyone: list[Any] | None = [None] * self.dims.replicate_size if writer else None
            dist.gather_object(mine, everyone, dst=dist.get_global_rank(self.replica_group, 0),
                               group=self.replica_group)
            if everyone is not None:
                state[CHECKPOINT_KEY] = {
                    "group": 0,
                    "groups": {str(index): entries for index, entries in enumerate(everyone) if index},
                }
        return (yield)

    @hookimpl(wrapper=True)
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> Generator[None, Any, Any]:
        loaded = yield
        if not isinstance(loaded, dict) or CHECKPOINT_KEY not in loaded:
            return loaded
        loaded = dict(loaded)
        entry = loaded.pop(CHECKPOINT_KEY)
        if self.dims is None:
            return loaded
        index = self.replica_index
        if index != entry["group"]:
            groups = entry["groups"]
            if str(index) not in groups:
                raise CheckpointError(
                    f"{path} holds the states of {len(groups) + 1} DiLoCo groups, but this run has "
                    f"{self.dims.replicate_size} and this rank is in group {index}; resume with "
                    f"DiLoCoExtension(replicas={len(groups) + 1})."
                )
            loaded.update(groups[str(index)])
        return loaded

    @hookimpl(wrapper=True)
    def strategy_teardown(self) -> Generator[None, None, None]:
        for sync in self.syncs:
            if not failing():
                sync.finish()
            sync.in_flight = None
            sync.detach()
        self.syncs = []  # their copies of the parameters are the size of the model
        result = yield
        if self.dims is not None:
            if self.copies is None:
                self.dims.forget()  # the extension's own; the strategy forgets its own mesh
            self.dims = None
        return result


def _holds_dtensors(value: Any) -> bool:
    """Whether ``value`` (a checkpoint's state, nested) holds a ``DTensor`` anywhere."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(tensor, DTensor) for _, tensor in named_tensors(value))
