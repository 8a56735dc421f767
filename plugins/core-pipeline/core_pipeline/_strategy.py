"""``PipelineStrategy``: the model cut into stages, each rank running its stages in a schedule of micro-batches.

The processes, the process group, the launcher and the collectives are the core's (this class extends
:class:`core.toolkit.strategies.ParallelStrategy`). The ranks form a 2-D mesh ``("data_parallel",
"pipeline_parallel")``: each row of ``pipeline_parallel_size`` neighbouring ranks runs one copy of the pipeline, and
with ``data_parallel_size > 1`` the copies average their gradients after each step (one all-reduce per dtype within
each column of the mesh).

Set-up, in :meth:`PipelineStrategy.setup_module`, in this order:

1. the stages are cut (:mod:`core_pipeline._split`): by ``split_points``, or by ``stage_fn``;
2. stage ``s`` goes to pipeline rank ``s % pipeline_parallel_size`` (one stage per rank, or several for the
   interleaved schedule), and this rank's stage modules are made as views sharing the model's parameters;
3. with data parallelism the copies of each stage start from the first copy's values (a broadcast);
4. ``torch.distributed.pipelining.PipelineStage`` per local stage, then the schedule over them;
5. the model is pruned in place to this rank's stages: what ``Lite.setup`` returns holds this rank's part, with the
   whole model's parameter names, and optimizers made over the whole model are pruned to it when set up.

Checkpoints are written in the unsplit model's layout (:mod:`core_pipeline._layout`) by global rank 0 after
gathering every stage's part, and loaded on every rank, each taking its stages' entries.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from core import CheckpointError, ConfigurationError, Supports, hookimpl
from core.toolkit import is_whole
from core.toolkit.checkpoint import PRECISION_KEY, is_stateful, restore_state, to_checkpoint
from core.toolkit.strategies import (
    DATA_PARALLEL,
    PIPELINE_PARALLEL,
    OptimizerWrapper,
    ParallelDims,
    ParallelOptions,
    ParallelStrategy,
    StatefulGroup,
    StepRunner,
    check_degree,
    fit_degrees,
)

from ._layout import (
    OptimizerLayout,
    by_name,
    cpu_state,
    local_state,
    merged_module_state,
    numbered,
    whole_groups,
)
from ._module import PipelineModule, PipelineStepModule
from ._split import StageFn, prune, split_at, stage_modules

if TYPE_CHECKING:
    from typing_extensions import Unpack

MESH_DIMENSIONS: Final = (DATA_PARALLEL, PIPELINE_PARALLEL)
"""The names of the device mesh's dimensions, outermost first."""

SCHEDULES: Final[Mapping[str, type]] = {
    "GPipe": ScheduleGPipe,
    "1F1B": Schedule1F1B,
    "Interleaved1F1B": ScheduleInterleaved1F1B,
}
"""The schedules by name: all forwards then all backwards; one forward one backward; 1F1B over several stages
per rank (``stages_per_rank``), which shrinks the pipeline's idle time."""

_MULTI_STAGE: Final = frozenset({"Interleaved1F1B"})
_OWNER: Final = "PipelineStrategy"

_CUT: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""Models this process has cut (and pruned to its stages): setting one up again is refused with the way out."""


class PipelineStrategy(ParallelStrategy):
    """Pipeline parallelism: each rank holds consecutive layers and passes activations on, micro-batch by micro-batch.

    :param split_points: Names of the submodules that begin stages 1, 2, ... (``["layers.2"]``: two stages), in
        the order ``forward`` runs them. The number of stages is ``len(split_points) + 1``.
    :param stage_fn: Instead of split points, ``fn(model, stage_index, num_stages) -> stage module``, built from the
        model's own submodules; needs ``num_stages``.
    :param num_stages: The number of stages ``stage_fn`` cuts (derived from ``split_points`` otherwise).
    :param schedule: ``"GPipe"``, ``"1F1B"`` or ``"Interleaved1F1B"``.
    :param n_microbatches: How many micro-batches each batch is cut into; the batch size must be a multiple.
        Default: the number of stages.
    :param loss_fn: ``loss_fn(output, target)`` computed on each micro-batch by the last stage (a mean, such as
        ``cross_entropy``, so that the micro-batches' mean is the batch's loss).
    :param stages_per_rank: Stages each rank holds: 1 for GPipe and 1F1B, at least 2 for Interleaved1F1B.
    :param data_parallel_size: Copies of the pipeline; ``"auto"``: what the pipeline leaves of the world size.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name``, ``activation_checkpointing_policy`` (which submodules recompute their
        activations in backward, applied at set-up before the model is split into stages;
        :class:`core.toolkit.strategies.ParallelOptions`).
    """

    message_prefix: ClassVar[str] = "core-pipeline"
    default_alias: ClassVar[str] = "pipeline"
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "precision": {"16-mixed", "16"}},
        hint="The pipeline's schedule runs backward itself, so 16-mixed's loss scaler never sees the loss: use "
             "precision='bf16-mixed' or '32-true'. On TPUs use strategy='xla'.",
    )

    def __init__(
        self,
        split_points: Sequence[str] | None = None,
        stage_fn: StageFn | None = None,
        num_stages: int | None = None,
        schedule: str = "1F1B",
        n_microbatches: int | None = None,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        stages_per_rank: int | None = None,
        data_parallel_size: int | Literal["auto"] = "auto",
        **options: Unpack[ParallelOptions],
    ) -> None:
        super().__init__(**options)
        self.num_stages = _num_stages(split_points, stage_fn, num_stages)  # checks split_points before the copy
        self.split_points = tuple(split_points) if split_points is not None else None
        self.stage_fn = stage_fn
        if schedule not in SCHEDULES:
            raise ConfigurationError(
                f"{_OWNER}(schedule={schedule!r}) is not a schedule; expected one of {list(SCHEDULES)}."
            )
        self.schedule = schedule
        self.stages_per_rank = _stages_per_rank(schedule, stages_per_rank, self.num_stages)
        self.n_microbatches = n_microbatches if n_microbatches is not None else max(self.num_stages, 1)
        if not is_whole(self.n_microbatches, 1):
            raise ConfigurationError(f"{_OWNER}(n_microbatches={n_microbatches!r}): expected a positive int.")
        if loss_fn is not None and not callable(loss_fn):
            raise ConfigurationError(f"{_OWNER}(loss_fn={loss_fn!r}): expected a function (output, target) -> loss.")
        self.loss_fn = loss_fn
        self.data_parallel_size = check_degree(_OWNER, "data_parallel_size", data_parallel_size)
        self._run = _RunState()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_run", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._run = _RunState()

    def __repr__(self) -> str:
        points = self.split_points
        how = f"split_points={list(points)}" if points is not None else f"stage_fn={self.stage_fn}"
        return (
            f"{type(self).__name__}(name={self.alias!r}, {how}, num_stages={self.num_stages}, "
            f"schedule={self.schedule!r}, n_microbatches={self.n_microbatches}, "
            f"data_parallel_size={self.data_parallel_size!r})"
        )

    @property
    def pipeline_parallel_size(self) -> int:
        """Ranks per copy of the pipeline: the stages over the stages each rank holds."""
        return self.num_stages // self.stages_per_rank

    @property
    def mesh_shape(self) -> ParallelDims:
        """The run's :attr:`parallel_dims`: ``data_parallel x pipeline_parallel`` (known once the strategy is part of
        a run; a strategy without a split raises, saying how to give one)."""
        dims = self.parallel_dims
        if dims is None:
            raise ConfigurationError(
                f"strategy={self.alias!r} needs to know where to cut the model: pass "
                f"strategy=PipelineStrategy(split_points=[...], loss_fn=...) (pip install core-pipeline gives "
                f"core_pipeline.PipelineStrategy) with {_HOW_TO_SPLIT}."
            )
        return dims

    def make_parallel_dims(self, devices_per_node: int, num_nodes: int) -> ParallelDims | None:
        """``data_parallel x pipeline_parallel`` over these processes: each row of ``pipeline_parallel_size``
        neighbouring ranks runs one copy of the pipeline. ``None`` without a split (the bare alias, refused at
        launch)."""
        if not self.num_stages:
            return None
        world_size = devices_per_node * num_nodes
        if world_size % self.pipeline_parallel_size:
            raise ConfigurationError(
                f"{_OWNER}: {self.num_stages} stage(s) / {self.stages_per_rank} per rank ({self.schedule}) = "
                f"pipeline_parallel_size {self.pipeline_parallel_size}, which does not divide the world size "
                f"{world_size} (devices={devices_per_node} per node x num_nodes={num_nodes}). "
                f"Cut the model into a number of stages that divides {world_size} x stages_per_rank, or run "
                f"{self.pipeline_parallel_size} x data_parallel_size processes."
            )
        return fit_degrees(_OWNER, (DATA_PARALLEL, self.data_parallel_size),
                           (PIPELINE_PARALLEL, self.pipeline_parallel_size), devices_per_node, num_nodes)

    @property
    def device_mesh(self) -> DeviceMesh:
        """The 2-D ``DeviceMesh`` (``data_parallel``, ``pipeline_parallel``) of the run's ranks: :attr:`world_mesh`."""
        return self.world_mesh

    # -- processes ------------------------------------------------------------------------------------

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        # The bare alias resolves (any accelerator, precision and device count may pair with it), but a run needs
        # to know where to cut the model: refused here, before any process starts.
        _ = self.mesh_shape
        return super().strategy_launch(function, args, kwargs)

    # -- model ----------------------------------------------------------------------------------------

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Cut the model into stages, keep this rank's, and build the schedule over them (see the module's doc)."""
        if self.loss_fn is None:
            raise ConfigurationError(
                f"strategy={self.alias!r} needs PipelineStrategy(loss_fn=...): the last stage computes the loss of "
                f"each micro-batch inside the schedule, e.g. loss_fn=torch.nn.functional.cross_entropy."
            )
        step_module = module if isinstance(module, StepRunner) else None
        if step_module is not None:  # the Trainer's: the user's Module is the model to cut, its forward the pipeline
            module = step_module.stepped_module
        if module in _CUT:
            raise ConfigurationError(
                f"This {type(module).__name__} was cut into pipeline stages by an earlier set-up in this process and "
                f"now holds only this rank's stages. Set up a new instance and load the checkpoint into it (the "
                f"Trainer: trainer.test(NewModule(), ckpt_path=...); Lite: lite.load(path, {{'model': model}}) after "
                f"lite.setup(new_model))."
            )
        split = split_at(module, self.split_points) if self.split_points is not None else None
        if split is not None and split.num_stages != self.num_stages:  # pragma: no cover - derived from the points
            raise ConfigurationError(f"split_points gave {split.num_stages} stages, expected {self.num_stages}.")
        model_keys = list(module.state_dict().keys())
        names = {id(parameter): name for name, parameter in module.named_parameters()}
        pipeline_mesh = self.device_mesh[PIPELINE_PARALLEL]
        pipeline_rank, pipeline_size = pipeline_mesh.get_local_rank(), pipeline_mesh.size()
        indices = [index for index in range(self.num_stages) if index % pipeline_size == pipeline_rank]
        views = stage_modules(module, split, self.stage_fn, indices, self.num_stages)
        local_tensors = [tensor for view in views for tensor in chain(view.parameters(), view.buffers())]
        held = sum(1 for _ in chain(module.parameters(), module.buffers()))
        prune(module, local_tensors)
        if len(local_tensors) < held:  # this rank lost the other ranks' stages
            _CUT.add(module)
        device = self.active.device or torch.device("cpu")
        data_parallel = self._broadcast_within_copies(local_tensors)
        group = pipeline_mesh.get_group()
        stages = [PipelineStage(view, index, self.num_stages, device, group=group)
                  for view, index in zip(views, indices, strict=True)]
        pipeline = PipelineModule(
            views, module, self._schedule(stages, self.loss_fn), self._schedule(stages, None),
            self.n_microbatches, holds_first=0 in indices, holds_last=self.num_stages - 1 in indices,
            pipeline_group=group, last_rank=dist.get_global_rank(group, (self.num_stages - 1) % pipeline_size),
            data_parallel_group=data_parallel,
        )
        self._run.modules[id(pipeline)] = (pipeline, model_keys)
        self._run.names.update(names)
        self._run.local.update(id(tensor) for tensor in local_tensors)
        self._run.model_order.extend(name for name in names.values() if name not in self._run.model_order)
        if step_module is None:
            return pipeline
        self._run.modules[id(module)] = (pipeline, model_keys)  # the Trainer saves and loads the Module itself
        return PipelineStepModule(step_module, pipeline)

    def _broadcast_within_copies(self, tensors: list[torch.Tensor]) -> dist.ProcessGroup | None:
        """With data parallelism, every copy of these stages starts from the first copy's values; returns the group."""
        if self.mesh_shape.size(DATA_PARALLEL) == 1:
            return None
        group = self.device_mesh[DATA_PARALLEL].get_group()
        source = dist.get_global_rank(group, 0)
        with torch.no_grad(), self.communicator.guard("broadcast of the initial parameters (pipeline stages)"):
            for tensor in tensors:
                dist.broadcast(tensor, src=source, group=group)
        return group

    def _schedule(self, stages: list[PipelineStage], loss_fn: Callable[..., torch.Tensor] | None) -> Any:
        schedule_class = SCHEDULES[self.schedule]
        if self.schedule in _MULTI_STAGE:
            return schedule_class(stages, n_microbatches=self.n_microbatches, loss_fn=loss_fn)
        if loss_fn is None:  # outputs only: forward passes, in GPipe's order
            schedule_class = ScheduleGPipe
        return schedule_class(stages[0], n_microbatches=self.n_microbatches, loss_fn=loss_fn)

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Keep this rank's parameters in an optimizer made over the whole model; learn every group's members."""
        run = self._run
        unknown = [parameter for group in optimizer.param_groups for parameter in group["params"]
                   if id(parameter) not in run.names]
        if unknown:
            raise ConfigurationError(
                f"The optimizer holds {len(unknown)} parameter(s) of no module set up by {self.alias!r}; set the "
                f"module up first (lite.setup(model, optimizer) takes both)."
            )
        membership: dict[str, int] = {}
        for index, group in enumerate(optimizer.param_groups):
            group["params"] = [parameter for parameter in group["params"] if id(parameter) in run.local]
            membership.update({run.names[id(parameter)]: index for parameter in group["params"]})
        memberships: list[dict[str, int] | None] = [None] * self.active.cluster.world_size
        self.communicator.call("all_gather of the optimizer's parameter names (pipeline)", dist.all_gather_object,
                               memberships, membership)
        local = tuple(tuple(run.names[id(parameter)] for parameter in group["params"])
                      for group in optimizer.param_groups)
        whole = whole_groups([item for item in memberships if item], run.model_order, len(optimizer.param_groups))
        run.optimizers[id(optimizer)] = (optimizer, OptimizerLayout(local, whole))
        return optimizer

    @hookimpl
    def strategy_backward(self, tensor: torch.Tensor, module: nn.Module | None) -> bool | None:
        if isinstance(module, PipelineStepModule):
            module = module.pipeline
        pipelines = [module] if isinstance(module, PipelineModule) else [
            entry[0] for entry in self._run.modules.values()
        ]
        if any(pipeline.last_loss is tensor for pipeline in pipelines):
            return True  # the schedule ran every backward pass inside model(inputs, target=...)
        raise ConfigurationError(
            "Under the pipeline strategy backward runs inside the training step: loss = model(inputs, target=targets) "
            "(self(inputs, target=targets) in a Module's training_step) runs the schedule (forward and backward of "
            "every micro-batch), and backward(loss) takes that returned loss, unchanged, and has nothing left to do. "
            "A loss computed outside the model, or changed after it (scaled, summed with another term), cannot be "
            "backpropagated through the stages: put it in PipelineStrategy(loss_fn=...). The Trainer's "
            "accumulate_grad_batches > 1 scales the loss, so it is not supported: raise n_microbatches and the batch "
            "size instead."
        )

    @hookimpl
    def strategy_block_backward_sync(self, module: nn.Module) -> AbstractContextManager[None]:
        # Gradients of several model(...) calls add up in .grad; inside this context the copies skip averaging them.
        if isinstance(module, PipelineStepModule):
            module = module.pipeline
        if not isinstance(module, PipelineModule):
            raise ConfigurationError(
                f"no_backward_sync needs the module lite.setup returned under {self.alias!r} (a PipelineModule), got "
                f"{type(module).__name__}."
            )
        return _without_gradient_sync(module)

    # -- checkpoints ----------------------------------------------------------------------------------

    @hookimpl
    def strategy_save_state(
        self, path: str, state: Mapping[str, Any], filter: Mapping[str, Callable[[str, Any], bool]] | None
    ) -> bool | None:
        pieces = {key: self._piece(value) for key, value in state.items() if self._owns(value)}
        active = self.active
        gathered: list[dict[str, Any] | None] = [None] * active.cluster.world_size
        self.communicator.call("gathering the stages' state to rank 0 (pipeline)", dist.gather_object,
                               pieces, gathered if active.cluster.is_global_zero else None, dst=0)
        if active.cluster.is_global_zero:
            whole = {key: self._merged(value, [item[key] for item in gathered if item]) if key in pieces else value
                     for key, value in state.items()}
            checkpoint = to_checkpoint(whole, filter, active.hook.precision_state_dict())
            active.hook.checkpoint_io_save(checkpoint=checkpoint, path=path, storage_options=None)
        active.hook.strategy_barrier(name="save_checkpoint")
        return True

    def _owns(self, value: Any) -> bool:
        if isinstance(value, StatefulGroup):  # the Trainer's optimizers
            return bool(value.stateful_items) and all(self._owns(item) for item in value.stateful_items)
        value = _inner(value)
        return id(value) in self._run.modules or id(value) in self._run.optimizers

    def _piece(self, value: Any) -> Any:
        if isinstance(value, StatefulGroup):
            return [self._piece(item) for item in value.stateful_items]
        value = _inner(value)
        if id(value) in self._run.modules:
            return cpu_state(value.state_dict())
        optimizer, layout = self._run.optimizers[id(value)]
        return by_name(optimizer.state_dict(), layout)

    def _merged(self, value: Any, pieces: list[Any]) -> Any:
        if isinstance(value, StatefulGroup):
            return [self._merged(item, [piece[index] for piece in pieces])
                    for index, item in enumerate(value.stateful_items)]
        value = _inner(value)
        if id(value) in self._run.modules:
            return merged_module_state(pieces, self._run.modules[id(value)][1])
        return numbered(pieces, self._run.optimizers[id(value)][1])

    @hookimpl
    def strategy_load_state(self, path: str, state: dict[str, Any], strict: bool, weights_only: bool) -> dict[str, Any]:
        checkpoint: dict[str, Any] = self.active.hook.checkpoint_io_load(
            path=path, map_location="cpu", weights_only=weights_only
        )
        if not isinstance(checkpoint, dict):
            raise CheckpointError(f"The checkpoint {path!r} holds a {type(checkpoint).__name__}, not a dict.")
        precision_state = checkpoint.pop(PRECISION_KEY, None)
        targets: dict[str, Any] = {}
        for key, value in state.items():
            if key in checkpoint and id(value) in self._run.modules:
                pipeline, model_keys = self._run.modules[id(value)]
                targets[key] = pipeline.__dict__["model"]
                checkpoint[key] = self._stage_entries(checkpoint[key], pipeline, model_keys)
            elif key in checkpoint and id(value) in self._run.optimizers:
                targets[key] = value
                checkpoint[key] = local_state(checkpoint[key], self._run.optimizers[id(value)][1],
                                              f"{path!r}, entry {key!r}")
            elif key in checkpoint and isinstance(value, StatefulGroup) and self._owns(value):
                targets[key] = value
                checkpoint[key] = self._local_optimizer_states(checkpoint[key], value, f"{path!r}, entry {key!r}")
            else:
                targets[key] = value
        remaining = restore_state(targets, checkpoint, strict, path)
        state.update((key, value) for key, value in targets.items() if not is_stateful(value))
        if precision_state is not None:
            self.active.hook.precision_load_state_dict(state=precision_state)
        return remaining

    def _local_optimizer_states(self, saved: Any, optimizers: StatefulGroup, where: str) -> Any:
        """This rank's part of each optimizer's whole-model state in a saved list (the Trainer's optimizers)."""
        items = optimizers.stateful_items
        if not isinstance(saved, list) or len(saved) != len(items):
            return saved  # the group's load_state_dict says what is wrong
        return [local_state(state, self._run.optimizers[id(_inner(item))][1], f"{where}[{index}]")
                for index, (state, item) in enumerate(zip(saved, items, strict=True))]

    @staticmethod
    def _stage_entries(saved: Any, pipeline: PipelineModule, model_keys: Sequence[str]) -> Any:
        """This rank's entries of a whole model's state dict; keys the model never had stay (strict loads flag them)."""
        if not isinstance(saved, Mapping):
            return saved
        mine = set(pipeline.state_dict().keys())
        elsewhere = set(model_keys) - mine
        return {key: value for key, value in saved.items() if key not in elsewhere}

    # -- end of the run -------------------------------------------------------------------------------

    def forget_run(self) -> None:
        """The pipelines and optimizers of the run go with it (the base class drops the mesh)."""
        self._run = _RunState()
        super().forget_run()


def _inner(value: Any) -> Any:
    """The optimizer an :class:`OptimizerWrapper` holds (Lite and the Trainer wrap theirs); anything else as it is."""
    return value.set_up_optimizer if isinstance(value, OptimizerWrapper) else value


@contextmanager
def _without_gradient_sync(module: PipelineModule) -> Iterator[None]:
    module.sync_gradients = False
    try:
        yield
    finally:
        module.sync_gradients = True


class _RunState:
    """What one run set up: the pipelines, the optimizers and how their parameters are named."""

    def __init__(self) -> None:
        self.modules: dict[int, tuple[PipelineModule, list[str]]] = {}
        self.optimizers: dict[int, tuple[torch.optim.Optimizer, OptimizerLayout]] = {}
        self.names: dict[int, str] = {}  # id(parameter) -> its name in the whole model
        self.local: set[int] = set()  # ids of the tensors this rank's stages hold
        self.model_order: list[str] = []  # every parameter name of the set-up models, in order


_HOW_TO_SPLIT: Final = (
    "split_points=['layers.2', ...] (names of the submodules that begin each stage after the first) or "
    "stage_fn=fn(model, stage_index, num_stages) with num_stages="
)


def _num_stages(split_points: Sequence[str] | None, stage_fn: StageFn | None, num_stages: int | None) -> int:
    """The number of stages; 0 for no split at all (the bare alias), refused when the run is resolved."""
    if split_points is None and stage_fn is None:
        return 0
    if split_points is not None and stage_fn is not None:
        raise ConfigurationError(f"{_OWNER} takes one way to cut the model, not both: {_HOW_TO_SPLIT}.")
    if split_points is not None:
        if isinstance(split_points, str) or not all(isinstance(point, str) for point in split_points):
            raise ConfigurationError(
                f"{_OWNER}(split_points={split_points!r}): expected a list of submodule names, such as ['layers.2']."
            )
        if num_stages is not None and num_stages != len(split_points) + 1:
            raise ConfigurationError(
                f"{_OWNER}(num_stages={num_stages}) contradicts split_points, which cut {len(split_points) + 1} "
                f"stages; leave num_stages out."
            )
        return len(split_points) + 1
    if not callable(stage_fn):
        raise ConfigurationError(
            f"{_OWNER}(stage_fn={stage_fn!r}): expected a function (model, stage_index, num_stages) -> module."
        )
    if not is_whole(num_stages, 1):
        raise ConfigurationError(f"{_OWNER}(stage_fn=...) needs num_stages= (a positive int), got {num_stages!r}.")
    return num_stages


def _stages_per_rank(schedule: str, stages_per_rank: int | None, num_stages: int) -> int:
    multi = schedule in _MULTI_STAGE
    value = stages_per_rank if stages_per_rank is not None else (2 if multi else 1)
    num_stages = num_stages or value  # no split yet (the bare alias): checked when the run is resolved
    if not is_whole(value, 1):
        raise ConfigurationError(f"{_OWNER}(stages_per_rank={stages_per_rank!r}): expected a positive int.")
    if multi and value < 2:
        raise ConfigurationError(
            f"{_OWNER}(schedule={schedule!r}) interleaves several stages per rank: stages_per_rank must be >= 2, got "
            f"{value}. Use schedule='1F1B' for one stage per rank."
        )
    if not multi and value != 1:
        raise ConfigurationError(
            f"{_OWNER}(schedule={schedule!r}) runs one stage per rank, got stages_per_rank={value}; use "
            f"schedule='Interleaved1F1B' for several."
        )
    if num_stages % value:
        raise ConfigurationError(
            f"{_OWNER}: {num_stages} stage(s) cannot be dealt evenly to ranks holding stages_per_rank={value} each; "
            f"cut the model into a multiple of {value} stages."
        )
    return value
