"""Strategy classes for plugin authors: the single-process reference, and the base of process-group strategies.

**The single-process reference.** :class:`SingleDeviceStrategy` is the ``single_device`` strategy: one process,
one device. Its collective and checkpoint hooks are the reference every strategy class here extends;
:func:`check_reduce_op` validates a ``reduce_op`` against :data:`REDUCE_OPS`; :func:`set_up_part` finds what a strategy
made of a module at set-up (its wrapper, a sharded unit) or says the module was not set up by it.

**Process-group strategies.** :class:`ParallelStrategy` is what every strategy of one process per device over a
``torch.distributed`` group needs, so that ddp, fsdp, deepspeed, model_parallel and pipeline (and yours) derive from
the core, not from each other: the options common to all (``process_group_backend``, ``timeout``, ``start_method``
out of :data:`START_METHODS`, ``name``; a subclass passes them on as :class:`ParallelOptions`), launching, the
process group's set-up and teardown (no barrier while the rank function is failing), the collectives, backward
through the run's precision, and pickling of the options for spawned ranks. A subclass overrides
:meth:`ParallelStrategy.setup_module` (wrap, shard or parallelize the model) and, where a run leaves something
behind, :meth:`ParallelStrategy.release_run` and :meth:`ParallelStrategy.forget_run`. :func:`forget_mesh_groups`
drops the groups a ``DeviceMesh`` resolved once the world group is gone. :class:`Communicator` runs the collectives
of one rank and turns backend errors into :class:`CollectiveError` (:class:`CollectiveTimeoutError` when a rank
stopped participating, :class:`PeerLostError` when one vanished).

**Stepping an optimizer.** A strategy that implements ``strategy_optimizer_step`` steps through
:func:`optimizer_step` (``return optimizer_step(self.active, optimizer, **kwargs)``): the run's precision steps
it where the precision implements ``precision_optimizer_step``, ``optimizer.step()`` otherwise, exactly once
either way. Calling the hook itself never steps with a precision that lacks it, and stepping again when it
returned ``None`` steps twice with the built-in precisions.

**Launchers.** A :class:`Launcher` starts the processes of a job and runs the function in them; each holds its
own state. :class:`ScriptLauncher` runs the script again as the other local ranks (``ddp``);
:class:`MultiprocessingLauncher` starts them with ``torch.multiprocessing`` and returns rank 0's result
(``ddp_spawn``, ``ddp_fork``), raising :class:`ProcessFailedError` when one fails; :class:`ExternalLauncher` runs
this process's rank when someone else started the processes (torchrun, srun, ``python -m core.run``).
:class:`RankLauncher` is their common base: a rank whose function raises stops the whole job, and
:func:`failing` says, from inside the function (a strategy's teardown), that an exception is escaping it.
:class:`Layout` is where a node's processes sit in the job.

**Rendezvous.** Ranks a launcher starts on one node meet at a store the launcher serves, checked by the job id
in :data:`JOB_VARIABLE`; a rank that reached another job's store raises :class:`RendezvousError`.

**Activation checkpointing.** Every strategy here takes ``activation_checkpointing_policy`` (Lightning's
argument): :func:`checkpoint_activations` applies torch's composable checkpoint to the submodules it selects (module
classes, a function ``module -> bool``, :class:`EveryNth` for every n-th match) before the model is wrapped or
sharded, so state-dict keys stay as without it; :func:`checkpointed_modules` says which those are,
:func:`is_checkpointed` whether one already is, :func:`check_activation_checkpointing_policy` refuses a malformed
policy when the strategy is made, and :func:`saved_tensor_bytes` measures what a step keeps for backward.

**Other frameworks' arguments.** A process-group strategy given an argument that Lightning's strategy of the same
name takes and it does not either notes once that it means nothing here (:class:`IgnoredArgumentWarning`) or
refuses it by name with why (:func:`take_other_arguments`, from the class's ``refused_arguments`` and
``ignored_arguments``; :data:`RUN_ARGUMENTS` are those that name a part of the run Lite or the Trainer selects).

**Sharded strategies.** :class:`ShardedStrategy` is the base of strategies whose parameters become ``DTensor`` s
(fsdp, model_parallel): empty-init on the meta device and materialising this rank's part, rank 0's initial values,
optimizers pointed at the replaced parameters, sharded or gathered checkpoints, resharding at the end of the run.

**The device mesh.** :class:`ParallelDims` is a run's degrees of parallelism (:data:`REPLICATE`,
:data:`DATA_PARALLEL`, :data:`CONTEXT_PARALLEL`, :data:`PIPELINE_PARALLEL`, :data:`TENSOR_PARALLEL`: the
:data:`MESH_DIMENSIONS`, outermost first), checked together against the world size (the error prints every factor),
and the run's one ``DeviceMesh`` with its named sub-meshes and flattened dimensions. A strategy says its degrees in
:meth:`ParallelStrategy.make_parallel_dims` (:func:`fit_degrees` fits two options that may be ``"auto"``;
:func:`check_degree` checks one); the base builds the mesh when the process group is set up, splits the samplers'
data along it, and drops it at the end of the run. Other strategies and extensions read it as
:attr:`ParallelStrategy.parallel_dims` (:attr:`ParallelStrategy.world_mesh`) rather than building the same layout.

**Copies side by side.** An extension that synchronises groups of ranks itself (core-diloco) asks a strategy whose
:attr:`ParallelStrategy.supports_outer_replicas` is true (fsdp, model_parallel) to
:meth:`ParallelStrategy.replicate_outside`: its mesh gets the outermost dimension :data:`REPLICATE`, it shards and
reduces within its copy's ranks only (:func:`without_replicate` is the copy's sub-mesh), and the samplers give every
copy its own data.

**The objects above.** Strategies sit below ``Lite`` and the Trainer and import neither. One that must recognise
what those layers made of the objects it set up checks the protocols they implement: :class:`OptimizerWrapper`
(Lite's optimizer wrapper, holding the optimizer the strategy set up), :class:`StepRunner` (the Trainer's module
that runs the Module's step methods) and :class:`StatefulGroup` (several optimizers or schedulers saved under one
key).

**Sharded state.** The pieces it is made of, for a strategy that needs them on their own:
:class:`ReplacedParameters` remembers which parameter replaced which at set-up, so that an optimizer made before
points at the new ones and the originals get the trained values back; :func:`gather_full_state` gathers a state's
``DTensor`` s into whole tensors on the CPU (a collective); :func:`accept_whole_tensors` and
:func:`accept_whole_optimizer_state` let ``load_state_dict`` take whole tensors and keep this rank's part;
:func:`placed_like` does it for one tensor.
A module still holding ``DTensor`` s at the end of its run stays so: :data:`SHARDED_MODULES` (a
:class:`ShardedModules`) keeps the default process group for it until exit, and :func:`full_state_dict` makes it
whole when asked, one tensor at a time, on rank 0's CPU.
"""

from __future__ import annotations

from core.toolkit.strategies._activations import (
    ActivationCheckpointingPolicy,
    EveryNth,
    check_activation_checkpointing_policy,
    checkpoint_activations,
    checkpointed_modules,
    is_checkpointed,
    saved_tensor_bytes,
)
from core.toolkit.strategies._arguments import RUN_ARGUMENTS, IgnoredArgumentWarning, take_other_arguments
from core.toolkit.strategies._collectives import Communicator
from core.toolkit.strategies._errors import (
    CollectiveError,
    CollectiveTimeoutError,
    PeerLostError,
    ProcessFailedError,
)
from core.toolkit.strategies._launchers import (
    ExternalLauncher,
    Launcher,
    Layout,
    MultiprocessingLauncher,
    RankLauncher,
    ScriptLauncher,
    failing,
)
from core.toolkit.strategies._mesh import (
    AUTO,
    CONTEXT_PARALLEL,
    DATA_PARALLEL,
    MESH_DIMENSIONS,
    PIPELINE_PARALLEL,
    REPLICATE,
    TENSOR_PARALLEL,
    ParallelDims,
    check_degree,
    fit_degrees,
    forget_mesh_groups,
)
from core.toolkit.strategies._parallel import (
    START_METHODS,
    ParallelOptions,
    ParallelStrategy,
    without_replicate,
)
from core.toolkit.strategies._rendezvous import JOB_VARIABLE, RendezvousError
from core.toolkit.strategies._runtime import OptimizerWrapper, StatefulGroup, StepRunner
from core.toolkit.strategies._sharded import ShardedStrategy
from core.toolkit.strategies._sharding import (
    SHARDED_MODULES,
    ReplacedParameters,
    ShardedModules,
    accept_whole_optimizer_state,
    accept_whole_tensors,
    full_state_dict,
    gather_full_state,
    placed_like,
)
from core.toolkit.strategies._single import REDUCE_OPS, SingleDeviceStrategy, check_reduce_op, set_up_part
from core.toolkit.strategies._steps import optimizer_step

__all__ = [
    "AUTO",
    "CONTEXT_PARALLEL",
    "DATA_PARALLEL",
    "JOB_VARIABLE",
    "MESH_DIMENSIONS",
    "PIPELINE_PARALLEL",
    "REDUCE_OPS",
    "REPLICATE",
    "RUN_ARGUMENTS",
    "SHARDED_MODULES",
    "START_METHODS",
    "TENSOR_PARALLEL",
    "ActivationCheckpointingPolicy",
    "CollectiveError",
    "CollectiveTimeoutError",
    "Communicator",
    "EveryNth",
    "ExternalLauncher",
    "IgnoredArgumentWarning",
    "Launcher",
    "Layout",
    "MultiprocessingLauncher",
    "OptimizerWrapper",
    "ParallelDims",
    "ParallelOptions",
    "ParallelStrategy",
    "PeerLostError",
    "ProcessFailedError",
    "RankLauncher",
    "RendezvousError",
    "ReplacedParameters",
    "ScriptLauncher",
    "ShardedModules",
    "ShardedStrategy",
    "SingleDeviceStrategy",
    "StatefulGroup",
    "StepRunner",
    "accept_whole_optimizer_state",
    "accept_whole_tensors",
    "check_activation_checkpointing_policy",
    "check_degree",
    "check_reduce_op",
    "checkpoint_activations",
    "checkpointed_modules",
    "failing",
    "fit_degrees",
    "forget_mesh_groups",
    "full_state_dict",
    "gather_full_state",
    "is_checkpointed",
    "optimizer_step",
    "placed_like",
    "saved_tensor_bytes",
    "set_up_part",
    "take_other_arguments",
    "without_replicate",
]
