"""``ModelParallelStrategy``: the user's parallelization (tensor parallel, fully sharded) over a 2-D device mesh.

The processes, the process group, the launcher and the collectives are the core's (this class extends
:class:`core.toolkit.strategies.ShardedStrategy`, which also gives empty-init, optimizers pointed at the new
parameters, sharded or gathered checkpoints and the resharding at the end of the run). What it adds is the model's
set-up: the strategy builds a ``DeviceMesh`` with the dimensions ``("data_parallel", "tensor_parallel")`` once the
process group exists, and the user's *parallelize function* ``fn(module, device_mesh) -> module`` decides what to
do with it (``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` over
``device_mesh["tensor_parallel"]``, then ``fully_shard`` over ``device_mesh["data_parallel"]``). The function comes
from one of three places, first found wins:

1. the launched function, before ``lite.setup`` (``fn(model, lite.device_mesh)``: the module arrives parallelized);
2. the Module's ``configure_model`` under the Trainer (it reads the mesh and parallelizes in place);
3. ``ModelParallelStrategy(parallelize_fn=fn)``, applied in :meth:`setup_module` after rank 0's initial
   values were broadcast, so every rank parallelizes the same model.

The order of set-up, in :meth:`ModelParallelStrategy.setup_module`: parallelize (3, if the module is still
plain), check that data parallelism has a ``fully_shard`` to average gradients with, materialise a model created on
the meta device, point optimizers made before set-up at the new parameters, install the load hooks that make any
checkpoint fit (:func:`core.toolkit.strategies.accept_whole_tensors`).

After the run the module stays parallelized, as in Lightning: its parameters stay ``DTensor`` s on the run's mesh
(each rank holding its part; ``fully_shard`` units a forward left gathered are resharded at teardown), and the
process group is kept while it lives (:class:`core.toolkit.strategies.ShardedModules`), so it computes as it is
and the next run (``Trainer.test`` after ``Trainer.fit``) adopts the group and the module without parallelizing it
again. Making it whole is explicit: :func:`core.toolkit.strategies.full_state_dict` (also
``core_model_parallel.full_state_dict``) gathers one tensor at a time, to rank 0's CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from itertools import chain
from typing import TYPE_CHECKING, ClassVar, Final, Literal, TypeAlias, cast

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.strategies import (
    DATA_PARALLEL,
    SHARDED_MODULES,
    TENSOR_PARALLEL,
    ParallelDims,
    ParallelOptions,
    ShardedStrategy,
    accept_whole_tensors,
    check_degree,
    fit_degrees,
    without_replicate,
)

from ._state import holds_placed_tensors

if TYPE_CHECKING:
    from typing_extensions import Unpack

MESH_DIMENSIONS: Final = (DATA_PARALLEL, TENSOR_PARALLEL)
"""The names of the device mesh's dimensions, outermost first (Lightning's)."""

ParallelizeFn: TypeAlias = Callable[[torch.nn.Module, DeviceMesh], torch.nn.Module]

_SINGLE_FILE_IO: Final = frozenset({"torch", "async"})
_SCALED_PRECISIONS: Final = frozenset({"16-mixed", "16"})
_OWNER: Final = "ModelParallelStrategy"


def _supports(save_distributed_checkpoint: bool) -> Supports:
    never: dict[str, set[str]] = {"accelerator": {"tpu", "mps"}, "precision": set(_SCALED_PRECISIONS)}
    if save_distributed_checkpoint:
        never["checkpoint_io"] = set(_SINGLE_FILE_IO)
    return Supports(
        never=never,
        hint="model_parallel keeps gradients sharded, which 16-mixed's loss scaler cannot check for infs across "
             "ranks: use precision='bf16-mixed' or '32-true'. Sharded checkpoints are written by every rank: keep "
             "the default checkpoint_io 'distributed' (pip install core-dcp), or pass "
             "ModelParallelStrategy(save_distributed_checkpoint=False) to gather one file on rank 0 for 'torch' / "
             "'async'. On TPUs use strategy='xla'.",
    )


class ModelParallelStrategy(ShardedStrategy):
    """Tensor parallelism within a node and (fully sharded) data parallelism across nodes, on a 2-D device mesh.

    :param parallelize_fn: ``fn(module, device_mesh) -> module`` applying the parallelisms in place; optional when
        the module is parallelized before set-up (with ``lite.device_mesh`` in the launched function, or in
        ``configure_model`` with ``self.device_mesh``).
    :param data_parallel_size: Replicas of the model. ``"auto"``: the number of nodes (or what
        ``tensor_parallel_size`` leaves of the world size).
    :param tensor_parallel_size: Ranks sharing one replica. ``"auto"``: the devices of a node (or what
        ``data_parallel_size`` leaves).
    :param save_distributed_checkpoint: ``True``: every rank writes its shards (``distributed`` checkpoint_io, the
        default then); ``False``: the whole state is gathered and rank 0 writes one file.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name``, ``activation_checkpointing_policy`` (which submodules recompute their
        activations in backward, applied at set-up before parallelize_fn runs;
        :class:`core.toolkit.strategies.ParallelOptions`).
    """

    message_prefix: ClassVar[str] = "core-model-parallel"
    default_alias: ClassVar[str] = "model_parallel"
    supports_outer_replicas: ClassVar[bool] = True
    sharded_checkpoint_option = "save_distributed_checkpoint=True"
    full_checkpoint_option = "save_distributed_checkpoint=False"

    def __init__(
        self,
        parallelize_fn: ParallelizeFn | None = None,
        data_parallel_size: int | Literal["auto"] = "auto",
        tensor_parallel_size: int | Literal["auto"] = "auto",
        save_distributed_checkpoint: bool = True,
        **options: Unpack[ParallelOptions],
    ) -> None:
        super().__init__(sharded_checkpoint=bool(save_distributed_checkpoint), **options)
        if parallelize_fn is not None and not callable(parallelize_fn):
            raise ConfigurationError(
                f"{_OWNER}(parallelize_fn={parallelize_fn!r}): expected a function (module, device_mesh) -> module."
            )
        self.parallelize_fn = parallelize_fn
        self.data_parallel_size = check_degree(_OWNER, "data_parallel_size", data_parallel_size)
        self.tensor_parallel_size = check_degree(_OWNER, "tensor_parallel_size", tensor_parallel_size)
        self.save_distributed_checkpoint = bool(save_distributed_checkpoint)
        self.supports = _supports(self.save_distributed_checkpoint)  # per object

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, data_parallel_size={self.data_parallel_size!r}, "
            f"tensor_parallel_size={self.tensor_parallel_size!r}, "
            f"save_distributed_checkpoint={self.save_distributed_checkpoint})"
        )

    @property
    def mesh_shape(self) -> ParallelDims:
        """The run's :attr:`parallel_dims` (known once the strategy is part of a run): ``data_parallel x
        tensor_parallel``, with ``replicate`` outermost when the run holds copies side by side."""
        return cast("ParallelDims", self.parallel_dims)  # never None: make_parallel_dims always says its degrees

    def make_parallel_dims(self, devices_per_node: int, num_nodes: int) -> ParallelDims:
        """``data_parallel x tensor_parallel`` over these processes; ``"auto"`` puts tensor parallelism within a
        node and data parallelism across nodes. With copies side by side (asked for by an extension such as
        core-diloco), the base calls it with one copy's share of the processes."""
        return fit_degrees(_OWNER, (DATA_PARALLEL, self.data_parallel_size),
                           (TENSOR_PARALLEL, self.tensor_parallel_size), devices_per_node, num_nodes)

    @property
    def device_mesh(self) -> DeviceMesh:
        """The 2-D ``DeviceMesh`` (``data_parallel``, ``tensor_parallel``) of this run's ranks (of this copy's ranks
        when the strategy runs as copies side by side): :attr:`world_mesh` without ``replicate``."""
        return without_replicate(self.world_mesh)

    # -- model ----------------------------------------------------------------------------------------

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Parallelize (if still plain), check data parallelism, materialise, accept whole tensors on load.

        A module an earlier run in these processes left parallelized is taken as it is (its group was kept)."""
        earlier = SHARDED_MODULES.adopt(module)
        if earlier is not None:
            return earlier
        originals = dict(module.named_parameters())
        if not holds_placed_tensors(module):
            module = self._parallelize(module)
        self._check_data_parallel(module)
        if any(tensor.is_meta for tensor in chain(module.parameters(), module.buffers())):
            self.materialise(module)
        self.replaced.record(originals, module)
        accept_whole_tensors(module)
        return module

    def _parallelize(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.parallelize_fn is None:
            raise ConfigurationError(
                f"strategy={self.alias!r} got a module with no parallelized parameter and has no parallelize "
                f"function. Pass one: ModelParallelStrategy(parallelize_fn=fn), with fn(module, device_mesh) applying "
                f"parallelize_module over device_mesh['tensor_parallel'] and fully_shard over "
                f"device_mesh['data_parallel']; under the Trainer do that in the Module's configure_model. For data "
                f"parallelism alone use strategy='fsdp' or 'ddp'."
            )
        tensors = list(chain(module.parameters(), module.buffers()))
        if self.active.cluster.world_size > 1 and not any(tensor.is_meta for tensor in tensors):
            self.broadcast_from_rank_zero(tensors)  # every rank parallelizes the same model
        parallelized = self.parallelize_fn(module, self.device_mesh)
        if not isinstance(parallelized, torch.nn.Module):
            raise ConfigurationError(
                f"The parallelize_fn of {self.alias!r} returned a {type(parallelized).__name__}; it must return the "
                f"module (parallelized in place or a new one)."
            )
        return parallelized

    def _check_data_parallel(self, module: torch.nn.Module) -> None:
        size = self.mesh_shape.size(DATA_PARALLEL)
        if size > 1 and not any(isinstance(sub, FSDPModule) for sub in module.modules()):
            raise ConfigurationError(
                f"data_parallel_size={size}, but the parallelized module has no fully_shard unit, so nothing would "
                f"average the gradients of the {size} replicas. In the parallelize function call "
                f"fully_shard(module, mesh=device_mesh['data_parallel']) (on each block, then the root), or use "
                f"ModelParallelStrategy(data_parallel_size=1)."
            )

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        units = [sub for sub in module.modules() if isinstance(sub, FSDPModule)]
        if not units:  # no data-parallel replicas: no gradient synchronisation to skip
            return nullcontext()
        return _without_gradient_sync(units)


@contextmanager
def _without_gradient_sync(units: Sequence[FSDPModule]) -> Iterator[None]:
    for unit in units:
        unit.set_requires_gradient_sync(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.set_requires_gradient_sync(True, recurse=False)
