"""``DDPStrategy``: one process per device, gradients averaged by ``DistributedDataParallel``."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, ClassVar, Final

import torch
import torch.distributed as dist

# Imported before any process group exists, on purpose: this module's functions take ``group=group.WORLD``
# as a default argument, so importing it later (DistributedDataParallel does, lazily) would hold the
# world group forever and free it only during interpreter shutdown, where gloo aborts the process.
import torch.distributed.nn.functional
from torch.nn.parallel import DistributedDataParallel

from core import ConfigurationError, Supports, hookimpl
from core.toolkit import SingleDeviceStrategy, check_reduce_op, is_interactive

from . import _launchers
from ._collectives import Communicator
from ._rendezvous import host_store, store_for

START_METHODS: Final = ("popen", "spawn", "fork", "forkserver")
"""``popen`` re-runs the script as the other ranks; the others start them with ``torch.multiprocessing``."""

INTERACTIVE_START_METHODS: Final = ("fork",)


def _unbound(**_: Any) -> Any:
    raise ConfigurationError("The DDP strategy ran backward before strategy_setup_environment; use Lite.launch.")


def _as_timedelta(timeout: timedelta | float) -> timedelta:
    value = timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout))
    if value.total_seconds() <= 0:
        raise ConfigurationError(f"DDPStrategy(timeout={timeout!r}) must be a positive duration, such as "
                                 f"timedelta(minutes=30) or a number of seconds.")
    return value


class DDPStrategy(SingleDeviceStrategy):
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
    """

    max_processes: ClassVar[int | None] = None
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
    ) -> None:
        super().__init__()
        if start_method not in START_METHODS:
            raise ConfigurationError(
                f"DDPStrategy(start_method={start_method!r}) is not a start method; expected one of "
                f"{list(START_METHODS)}."
            )
        if bucket_cap_mb is not None and bucket_cap_mb <= 0:
            raise ConfigurationError(f"DDPStrategy(bucket_cap_mb={bucket_cap_mb!r}) must be positive or None.")
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_cap_mb = bucket_cap_mb
        self.process_group_backend = process_group_backend
        self.timeout = _as_timedelta(timeout)
        self.start_method = start_method
        self.sync_batchnorm = sync_batchnorm
        self.alias = name or ("ddp" if start_method == "popen" else f"ddp_{start_method}")
        self._communicator: Communicator | None = None
        self._precision_backward: Callable[..., Any] = _unbound
        self._wrappers: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()

    @property
    def name(self) -> str:
        """The alias this object answers to (``ddp``, ``ddp_spawn``, ``ddp_notebook``, ...)."""
        return self.alias

    @name.setter
    def name(self, value: str) -> None:
        self.alias = value

    def __getstate__(self) -> dict[str, Any]:
        # The options travel (a spawned process resolves them again); the state of a run stays behind.
        run_state = ("_active", "_communicator", "_precision_backward", "_wrappers")
        return {key: value for key, value in self.__dict__.items() if key not in run_state}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._active = None
        self._communicator = None
        self._precision_backward = _unbound
        self._wrappers = weakref.WeakSet()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.alias!r}, start_method={self.start_method!r}, "
            f"timeout={self.timeout}, find_unused_parameters={self.find_unused_parameters}, "
            f"static_graph={self.static_graph})"
        )

    @property
    def communicator(self) -> Communicator:
        if self._communicator is None:
            raise ConfigurationError(
                f"The strategy {self.alias!r} runs a collective before its process group exists; the runtime "
                f"calls strategy_setup_environment in every process first (use Lite.launch / Lite.run)."
            )
        return self._communicator

    # -- processes ------------------------------------------------------------------------------------

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        active = self.active
        _launchers.restore_launch_variables()
        cluster = active.refresh_cluster()
        if active.hook.environment_creates_processes_externally():
            _launchers.start_supervised_child()
            _launchers.install_exception_hook(cluster.global_rank, cluster.world_size)
            return _launchers.run_rank(function, args, kwargs, cluster.global_rank, cluster.world_size)
        self._refuse_interactive()
        main_port, job_id = cluster.main_port, None
        if active.config.num_nodes == 1:
            # This process starts every rank of the job: it serves the store itself, bound before any rank
            # starts, and the ranks connect to it (no port chosen now and bound later by someone else).
            hosted = host_store(cluster.main_address, cluster.main_port, cluster.world_size, self.timeout)
            main_port, job_id = hosted.port, hosted.job_id
        layout = _launchers.Layout(
            devices_per_node=active.config.devices_per_node,
            num_nodes=active.config.num_nodes,
            node_rank=cluster.node_rank,
            main_address=cluster.main_address,
            main_port=main_port,
            job_id=job_id,
        )
        if self.start_method != "popen":
            return _launchers.start_processes(function, args, kwargs, layout, self.start_method)
        _launchers.start_script_children(layout)
        _launchers.install_exception_hook(layout.global_rank(0), layout.world_size)
        return _launchers.run_rank(function, args, kwargs, layout.global_rank(0), layout.world_size)

    def _refuse_interactive(self) -> None:
        if self.start_method in INTERACTIVE_START_METHODS or not is_interactive():
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
    def strategy_setup_environment(self) -> None:
        self._precision_backward = self.active.bind("precision_backward")
        cluster = self.active.cluster
        self._communicator = Communicator(cluster.global_rank, self.timeout)
        if dist.is_initialized():
            return
        backend = self.process_group_backend or self.active.hook.accelerator_process_group_backend() or "gloo"
        with self.communicator.guard("init_process_group"):
            dist.init_process_group(
                backend,
                store=store_for(cluster, self.timeout),
                world_size=cluster.world_size,
                rank=cluster.global_rank,
                timeout=self.timeout,
            )

    @hookimpl
    def strategy_teardown(self) -> None:
        if not dist.is_initialized():
            return
        if _launchers.failing():
            # An exception is on its way out of the rank function. Its guard stops the other ranks before
            # the process group goes away; a barrier here would wait for ranks that are not coming.
            return
        self.communicator.barrier("teardown", self._barrier_device_ids())
        dist.destroy_process_group()
        self._release_wrappers()
        self._communicator = None

    def _release_wrappers(self) -> None:
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

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
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
    def strategy_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
        with self.communicator.guard("all_reduce of the gradients (backward)"):
            if self._precision_backward(tensor=tensor, module=module) is None:
                tensor.backward()  # no precision implements it: plain PyTorch
        return True

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        wrapped = next((sub for sub in module.modules() if isinstance(sub, DistributedDataParallel)), None)
        if wrapped is None:
            raise ConfigurationError(
                f"no_backward_sync needs a module set up by the {self.alias!r} strategy, but "
                f"{type(module).__name__} is not wrapped in DistributedDataParallel; pass the module that "
                f"setup() / setup_module() returned."
            )
        return wrapped.no_sync()

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
        return {"num_replicas": cluster.world_size, "rank": cluster.global_rank}

    def _object_device(self) -> torch.device | None:
        device = self.active.device
        return device if device is not None and device.type != "cpu" else None

    def _barrier_device_ids(self) -> list[int] | None:
        device = self._object_device()
        if device is None or dist.get_backend() != "nccl":
            return None
        return [device.index or 0]
