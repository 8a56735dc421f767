"""``ParallelStrategy``: what every strategy of one process per device over a ``torch.distributed`` group needs.

Launching (a :class:`Launcher` per run), the process group's set-up and teardown, the collectives with backend
errors turned into project errors, backward through the run's precision, and pickling of the options for spawned
ranks. A subclass decides what happens to the model (:meth:`ParallelStrategy.setup_module`): core-ddp wraps it in
``DistributedDataParallel``, core-fsdp shards it with ``fully_shard``, and so on.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypedDict

import torch
import torch.distributed as dist

# Imported before any process group exists, on purpose: this module's functions take ``group=group.WORLD`` as a
# default argument, so importing it once a group exists (DistributedDataParallel does, lazily, and so may a plugin's
# engine) would hold the world group forever and free it only during interpreter shutdown, where gloo aborts the
# process ("terminate called without an active exception"). core-ddp's module did this for every strategy that
# derived from it; every process-group strategy derives from this one now.
import torch.distributed.nn.functional

from core import ConfigurationError, hookimpl
from core.toolkit import is_interactive, is_whole

from ._activations import ActivationCheckpointingPolicy
from ._arguments import RUN_ARGUMENTS, take_other_arguments
from ._collectives import Communicator
from ._launchers import (
    THIS_PROCESS,
    ExternalLauncher,
    Launcher,
    Layout,
    MultiprocessingLauncher,
    RankLauncher,
    ScriptLauncher,
    failing,
)
from ._mesh import REPLICATE, ParallelDims
from ._rendezvous import store_for
from ._sharding import SHARDED_MODULES
from ._single import SingleDeviceStrategy, check_reduce_op

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from core import ActiveSet

class ParallelOptions(TypedDict, total=False):
    """The options of every process-group strategy (:class:`ParallelStrategy`'s own parameters).

    A subclass takes them as ``**options: Unpack[ParallelOptions]`` after its own parameters and passes them on to
    ``super().__init__(**options)``, so that each is declared and documented once; its :attr:`ParallelStrategy.
    default_alias` names it when ``name`` is not given.
    """

    process_group_backend: str | None
    timeout: timedelta | float
    start_method: str
    name: str | None
    activation_checkpointing_policy: ActivationCheckpointingPolicy


START_METHODS: Final = ("popen", "spawn", "fork", "forkserver")
"""``popen`` re-runs the script as the other ranks; the others start them with ``torch.multiprocessing``."""


def _unbound(**_: Any) -> Any:
    raise ConfigurationError("The strategy ran backward before strategy_setup_environment; use Lite.launch.")


def _as_timedelta(owner: str, timeout: timedelta | float) -> timedelta:
    value = timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout))
    if value.total_seconds() <= 0:
        raise ConfigurationError(f"{owner}(timeout={timeout!r}) must be a positive duration, such as "
                                 f"timedelta(minutes=30) or a number of seconds.")
    return value


def without_replicate(mesh: DeviceMesh) -> DeviceMesh:
    """``mesh`` without its :data:`REPLICATE` dimension: the part of the ranks one copy of the strategy works on.

    A mesh with no such dimension is returned as it is; on a mesh ``(replicate, a, b)`` this rank's ``(a, b)``
    sub-mesh (whose dimensions can be sliced further, ``sub["b"]``)."""
    names = tuple(mesh.mesh_dim_names or ())
    if REPLICATE not in names:
        return mesh
    rest = tuple(name for name in names if name != REPLICATE)
    if not rest:
        raise ConfigurationError(f"The device mesh {names} has only the {REPLICATE!r} dimension; nothing is left.")
    return mesh[rest[0]] if len(rest) == 1 else mesh[rest]


class ParallelStrategy(SingleDeviceStrategy):
    """One process per device, over a ``torch.distributed`` process group; the model is the subclass's business.

    :param process_group_backend: ``"gloo"``, ``"nccl"``, ...; by default the accelerator's choice.
    :param timeout: How long a collective may wait for the other ranks before failing.
    :param start_method: ``"popen"`` (run the script again as the other ranks), ``"spawn"``, ``"fork"`` or
        ``"forkserver"`` (start the ranks with ``torch.multiprocessing`` and return rank 0's result).
    :param name: The alias reported in messages (the class's :attr:`default_alias` when not given).
    :param activation_checkpointing_policy: Which submodules recompute their activations in backward (module
        classes, a function ``module -> bool``, :class:`EveryNth`); applied at set-up, before :meth:`setup_module`
        wraps or shards the module (:func:`checkpoint_activations`).
    :param other_arguments: Arguments of another framework's strategy (Lightning's) that this class does not take:
        each in :attr:`ignored_arguments` is taken with a one-time note, the rest are refused by name with a
        :class:`core.ConfigurationError` (:attr:`refused_arguments` says why), never a bare ``TypeError``.

    To write a strategy on it, override :meth:`setup_module` (and any hook whose behaviour differs, marked with
    ``@hookimpl`` again); :meth:`release_run` and :meth:`forget_run` are where a run's end releases what the
    strategy made. Set :attr:`message_prefix` to your distribution's name.

    A module that leaves :meth:`setup_module` holding ``DTensor`` s (sharded, parallelized) stays so after the
    run: the teardown then keeps the default process group instead of destroying it, for as long as such a module
    is alive, and the next run in these processes adopts it (see :class:`ShardedModules`).
    """

    max_processes: ClassVar[int | None] = None
    supports_outer_replicas: ClassVar[bool] = False
    """Whether :meth:`replicate_outside` is accepted: the subclass's :meth:`make_parallel_dims` gets one copy's
    share of the processes (:attr:`parallel_dims` puts :data:`REPLICATE` outermost), and it shards or parallelizes
    over :func:`without_replicate` of :attr:`world_mesh`."""
    default_alias: ClassVar[str] = "parallel"
    """The alias an instance answers to when no ``name`` is given."""
    message_prefix: ClassVar[str] = "core"
    """What the launcher's messages (and its scratch directories) start with: the distribution's name."""
    refused_arguments: ClassVar[Mapping[str, str]] = RUN_ARGUMENTS
    """Arguments another framework's strategy of this kind takes and this one refuses: name -> why, and what to
    write instead. A subclass extends it (``{**ParallelStrategy.refused_arguments, ...}``)."""
    ignored_arguments: ClassVar[Mapping[str, str]] = {}
    """Arguments another framework's strategy takes that mean nothing here: taken, with a one-time note (why)."""

    def __init__(
        self,
        process_group_backend: str | None = None,
        timeout: timedelta | float = timedelta(minutes=30),
        start_method: str = "popen",
        *,
        name: str | None = None,
        activation_checkpointing_policy: ActivationCheckpointingPolicy = None,
        **other_arguments: Any,
    ) -> None:
        super().__init__(activation_checkpointing_policy=activation_checkpointing_policy)
        owner = type(self).__name__
        if other_arguments:
            take_other_arguments(owner, other_arguments, refused=self.refused_arguments,
                                 ignored=self.ignored_arguments, takes=self._own_argument_names())
        if start_method not in START_METHODS:
            raise ConfigurationError(
                f"{owner}(start_method={start_method!r}) is not a start method; expected one of "
                f"{list(START_METHODS)}."
            )
        self.process_group_backend = process_group_backend
        self.timeout = _as_timedelta(owner, timeout)
        self.start_method = start_method
        self.alias = name or self.default_alias
        self._communicator: Communicator | None = None
        self._precision_backward: Callable[..., Any] = _unbound
        self._launcher: Launcher | None = None
        self._parallel_dims: ParallelDims | None = None
        self._set_up_modules: list[torch.nn.Module] = []
        self.outer_replicas = 1
        """How many independent copies of this strategy run side by side in this run (:meth:`replicate_outside`)."""
        self._side_by_side = False

    @classmethod
    def _own_argument_names(cls) -> set[str]:
        names = set(ParallelOptions.__annotations__)
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None:
                names.update(name for name, parameter in inspect.signature(init).parameters.items()
                             if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL))
        names.discard("self")
        return names

    @property
    def name(self) -> str:
        """The alias this object answers to (``ddp``, ``ddp_spawn``, ``fsdp``, ...)."""
        return self.alias

    @name.setter
    def name(self, value: str) -> None:
        self.alias = value

    _RUN_STATE: ClassVar[tuple[str, ...]] = (
        "_active", "_communicator", "_precision_backward", "_launcher", "_parallel_dims", "_set_up_modules",
    )

    def __getstate__(self) -> dict[str, Any]:
        # The options travel (a spawned process resolves them again); the state of a run stays behind.
        return {key: value for key, value in self.__dict__.items() if key not in self._RUN_STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._active = None
        self._communicator = None
        self._precision_backward = _unbound
        self._launcher = None
        self._parallel_dims = None
        self._set_up_modules = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.alias!r}, start_method={self.start_method!r}, timeout={self.timeout})"

    @property
    def communicator(self) -> Communicator:
        """This rank's collectives, which name what failed (exists once the process group is set up)."""
        if self._communicator is None:
            raise ConfigurationError(
                f"The strategy {self.alias!r} runs a collective before its process group exists; the runtime "
                f"calls strategy_setup_environment in every process first (use Lite.launch / Lite.run)."
            )
        return self._communicator

    @property
    def set_up_modules(self) -> tuple[torch.nn.Module, ...]:
        """The modules :meth:`setup_module` returned in the current run, in order (empty outside a run)."""
        return tuple(self._set_up_modules)

    @property
    def launcher(self) -> Launcher | None:
        """The launcher of the current run in this process (``None`` before ``strategy_launch``)."""
        return self._launcher

    def failing(self) -> bool:
        """Whether the rank function is failing here (:func:`core.toolkit.strategies.failing`)."""
        return failing()

    # -- processes ------------------------------------------------------------------------------------

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        self._launcher = launcher = self.make_launcher()
        result = launcher.launch(function, *args, **kwargs)
        SHARDED_MODULES.end_group_if_unused()  # the run's sharded modules were not kept past it: no group either
        return result

    def make_launcher(self) -> Launcher:
        """The launcher of this run: the processes exist already, or this process starts them (``start_method``)."""
        active = self.active
        THIS_PROCESS.restore_variables()
        cluster = active.refresh_cluster()
        if active.hook.environment_creates_processes_externally():
            return ExternalLauncher(self.message_prefix, cluster.global_rank, cluster.world_size)
        layout = Layout(
            devices_per_node=active.config.devices_per_node,
            num_nodes=active.config.num_nodes,
            node_rank=cluster.node_rank,
            main_address=cluster.main_address,
            main_port=cluster.main_port,
        )
        launcher: Launcher
        if self.start_method == "popen":
            launcher = ScriptLauncher(self.message_prefix, layout, self.timeout)
        else:
            launcher = MultiprocessingLauncher(self.message_prefix, layout, self.timeout, self.start_method)
        self._refuse_interactive(launcher)
        return launcher

    def _refuse_interactive(self, launcher: Launcher) -> None:
        if launcher.is_interactive_compatible or not is_interactive():
            return
        why = (
            "it starts the other ranks by running this program's command line again"
            if self.start_method == "popen"
            else f"{self.start_method!r} processes must import the function from a file, which a notebook cell is not"
        )
        raise ConfigurationError(
            f"strategy={self.alias!r} cannot start processes from an interactive session (a notebook or a REPL): "
            f"{why}. Use strategy='ddp_notebook' (fork) here, or run the code as a script (python train.py)."
        )

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        super().core_attach(active)
        self._parallel_dims = None
        _ = self.parallel_dims  # degrees that cannot fit the world size fail now, before any process starts

    @hookimpl
    def strategy_setup_environment(self) -> None:
        self._precision_backward = self.active.bind("precision_backward")
        self._check_replicas(self.active.cluster.world_size)
        self._communicator = Communicator(self.active.cluster.global_rank, self.timeout)
        self._set_up_process_group()
        dims = self.parallel_dims
        if dims is not None:
            # Every rank is here: the mesh's groups are made now, not on a first read that one rank alone may do.
            with self.communicator.guard("init_device_mesh"):
                dims.build((self.active.device or torch.device("cpu")).type)

    # -- the device mesh ------------------------------------------------------------------------------

    def make_parallel_dims(self, devices_per_node: int, num_nodes: int) -> ParallelDims | None:
        """The degrees of parallelism of this strategy over ``devices_per_node`` x ``num_nodes`` processes, or
        ``None`` for a strategy that lays its ranks out on no mesh (the default: ddp).

        The extension point of a subclass that uses a mesh (core-fsdp: ``ParallelDims(world_size,
        data_parallel_size=world_size, always=[DATA_PARALLEL])``). When the run holds copies side by side
        (:meth:`replicate_outside`), it is called with one copy's share of the processes, and :attr:`parallel_dims`
        adds the :data:`REPLICATE` dimension outermost: the subclass never handles copies itself.
        """
        return None

    @property
    def parallel_dims(self) -> ParallelDims | None:
        """This run's degrees of parallelism and its one ``DeviceMesh`` (``parallel_dims.world_mesh``, built when
        the process group is set up), or ``None`` when the strategy uses no mesh.

        The accessor for other strategies and extensions: they read the run's mesh, its sub-meshes and groups here
        (``parallel_dims.group(REPLICATE)``) instead of building the same layout again. Known once the strategy is
        part of a run (from ``core_attach``); the end of the run drops it.
        """
        if self._parallel_dims is None:
            self._parallel_dims = self._fit_parallel_dims()
        return self._parallel_dims

    @property
    def world_mesh(self) -> DeviceMesh:
        """The run's whole ``DeviceMesh`` (:data:`REPLICATE` included, when the run holds copies side by side).

        :raises ConfigurationError: outside a run, before the process group is set up, or for a strategy without a
            mesh (:attr:`parallel_dims` is ``None``).
        """
        dims = self._parallel_dims
        if dims is None or not dims.built:
            raise ConfigurationError(
                f"The device mesh of {self.alias!r} exists once the run's processes are set up, for a strategy that "
                f"lays its ranks out on one: read it inside the launched function (lite.device_mesh), in "
                f"configure_model under the Trainer, or in a hook called after strategy_setup_environment."
            )
        return dims.world_mesh

    def _fit_parallel_dims(self) -> ParallelDims | None:
        config = self.active.config
        nodes, devices, copies = config.num_nodes, config.devices_per_node, self.outer_replicas
        if not self._side_by_side:
            return self.make_parallel_dims(devices, nodes)
        # One copy's share: the nodes divided among the copies, else a node's devices, else consecutive ranks.
        if nodes % copies == 0:
            nodes //= copies
        elif devices % copies == 0:
            devices //= copies
        else:
            nodes, devices = 1, nodes * devices // copies
        try:
            dims = self.make_parallel_dims(devices, nodes)
        except ConfigurationError as error:
            raise ConfigurationError(
                f"{type(self).__name__} runs as one of {copies} copies side by side (replicate_outside({copies})), "
                f"each over {devices * nodes} of the {config.world_size} processes: {error}"
            ) from None
        return None if dims is None else dims.replicated(copies)

    def replicate_outside(self, replicas: int) -> None:
        """Run as ``replicas`` independent copies side by side, each over ``world_size // replicas`` consecutive
        ranks (copy ``g`` on ranks ``g * n`` to ``g * n + n - 1``): for an extension that synchronises the copies
        itself, as core-diloco does. Call it in every process before the strategy checks its layout: from the
        extension's ``core_attach`` marked ``tryfirst=True`` (before the strategy's own, which checks its sizes
        against the world size), and again before each run builds its mesh (a ``strategy_setup_environment``
        wrapper, before its ``yield``): the end of a run resets it to 1.

        The mesh then has :data:`REPLICATE` as its outermost dimension; the strategy shards, parallelizes and
        reduces gradients within its copy, and the samplers give every copy its own part of the data.

        :raises ConfigurationError: the strategy does not support it (:attr:`supports_outer_replicas`), or
            ``replicas`` does not divide the world size.
        """
        owner = type(self).__name__
        if not self.supports_outer_replicas:
            raise ConfigurationError(
                f"{owner} ({self.alias!r}) cannot run as independent copies side by side (its "
                f"supports_outer_replicas is False); strategies that can: fsdp (core-fsdp) and model_parallel "
                f"(core-model-parallel)."
            )
        if not is_whole(replicas, 1):
            raise ConfigurationError(f"{owner}.replicate_outside({replicas!r}): expected a positive number of copies.")
        self.outer_replicas = replicas
        self._side_by_side = True
        self._parallel_dims = None  # laid out again, with the copies
        if self._active is not None:
            self._check_replicas(self.active.cluster.world_size)

    def _check_replicas(self, world_size: int) -> None:
        if world_size % self.outer_replicas:
            raise ConfigurationError(
                f"{type(self).__name__}.replicate_outside({self.outer_replicas}): the copies must divide the world "
                f"size {world_size} into equal parts."
            )

    def _set_up_process_group(self) -> None:
        cluster = self.active.cluster
        backend = self.process_group_backend or self.active.hook.accelerator_process_group_backend() or "gloo"
        if dist.is_initialized() and SHARDED_MODULES.holds_group:
            # The group an earlier run kept for the modules it left sharded: adopted if it is this run's layout.
            if (dist.get_world_size(), dist.get_rank(), dist.get_backend()) == (
                cluster.world_size, cluster.global_rank, backend,
            ):
                return
            SHARDED_MODULES.end_group()
        if dist.is_initialized():
            return
        with self.communicator.guard("init_process_group"):
            dist.init_process_group(
                backend,
                store=store_for(cluster, self.timeout, self.message_prefix),
                world_size=cluster.world_size,
                rank=cluster.global_rank,
                timeout=self.timeout,
            )

    @hookimpl
    def strategy_teardown(self) -> None:
        try:
            if dist.is_initialized() and not failing():
                self.release_run()
            self._end_process_group()
        finally:
            self.forget_run()

    def _end_process_group(self) -> None:
        if failing():
            # An exception is on its way out of the rank function. Its launcher stops the other ranks before the
            # process group goes away; a barrier here would wait for ranks that are not coming. The launcher's
            # exception hook stays: the exception ends this process through it.
            return
        if isinstance(self._launcher, RankLauncher):
            self._launcher.end_run()
        if not dist.is_initialized():
            return
        self.communicator.last_barrier(self._barrier_device_ids())
        self._communicator = None
        SHARDED_MODULES.add(self._set_up_modules)
        if SHARDED_MODULES.needs_group():
            # A module this run (or an earlier one) left sharded refers to the group through its device mesh.
            SHARDED_MODULES.hold_group()
            return
        SHARDED_MODULES.release_group()
        dist.destroy_process_group()
        self.after_process_group()

    def release_run(self) -> None:
        """At teardown, while every rank is alive and the process group exists: collective clean-up of the run.

        Not called while the rank function fails. Default: nothing (core-fsdp reshards the units a forward left
        gathered, so that its modules leave the run holding their shards only).
        """

    def after_process_group(self) -> None:
        """Right after the process group was destroyed at the end of a run that did not fail. Default: nothing.

        Not called when the teardown keeps the group for modules left sharded (:class:`ShardedModules`)."""

    def forget_run(self) -> None:
        """Last step of every teardown, failed or not: drop what refers to the run's process groups.

        Extend it (calling ``super().forget_run()``): a group still referenced is freed at interpreter shutdown,
        where gloo's threads can abort the process. The default drops the run's :attr:`parallel_dims` with its
        device mesh and collects the reference cycles torch's sharding state sits in.
        """
        self._set_up_modules = []
        self.outer_replicas = 1
        self._side_by_side = False
        dims, self._parallel_dims = self._parallel_dims, None
        if dims is not None and dims.built:
            dims.forget()
            gc.collect()

    # -- model ----------------------------------------------------------------------------------------

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        SHARDED_MODULES.refuse_orphan(module, self.alias)
        self.checkpoint_activations(module)  # before the strategy wraps or shards it
        set_up = self.setup_module(module)
        self._set_up_modules.append(set_up)  # one holding DTensors at teardown keeps the group (ShardedModules)
        return set_up

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Make ``module`` ready for this strategy: wrap it, shard it, parallelize it. Called on every rank.

        The extension point of a subclass (``DDPStrategy`` wraps in ``DistributedDataParallel``). The default
        returns the module as it is: every rank then trains its own copy, with nothing averaging the gradients.
        """
        return module

    @hookimpl
    def strategy_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
        with self.communicator.guard("all_reduce of the gradients (backward)"):
            if self._precision_backward(tensor=tensor, module=module) is None:
                tensor.backward()  # no precision implements it: plain PyTorch
        return True

    # -- collectives ----------------------------------------------------------------------------------

    @hookimpl
    def strategy_reduce(self, tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
        return self.communicator.reduce(tensor, group, check_reduce_op(reduce_op))

    @hookimpl
    def strategy_all_gather(self, tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
        return self.communicator.all_gather(tensor, group, sync_grads)

    @hookimpl
    def strategy_broadcast(self, obj: Any, src: int) -> Any:
        world_size = self.active.cluster.world_size
        if not 0 <= src < world_size:
            raise ConfigurationError(f"broadcast(src={src}) names a rank outside a world of size {world_size}.")
        return self.communicator.broadcast(obj, src, self._object_device())

    @hookimpl
    def strategy_barrier(self, name: str | None) -> None:
        self.communicator.barrier(name, self._barrier_device_ids())

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        cluster = self.active.cluster
        dims = self.parallel_dims
        if dims is None:
            return {"num_replicas": cluster.world_size, "rank": cluster.global_rank}
        # The ranks of one replica (a tensor- or pipeline-parallel group) see the same batch; copies of the strategy
        # side by side (REPLICATE) each get their own part.
        num_replicas, rank = dims.sampler_split(cluster.global_rank)
        return {"num_replicas": num_replicas, "rank": rank}

    def _object_device(self) -> torch.device | None:
        device = self.active.device
        return device if device is not None and device.type != "cpu" else None

    def _barrier_device_ids(self) -> list[int] | None:
        device = self._object_device()
        if device is None or dist.get_backend() != "nccl":
            return None
        return [device.index or 0]
