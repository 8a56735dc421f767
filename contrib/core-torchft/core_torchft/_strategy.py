"""``torchft_ddp``: data parallelism across replica groups that may die and rejoin without stopping the others.

Each replica group is one process started on its own (by hand, a scheduler, ``python train.py`` with
``REPLICA_GROUP_ID=i``); the groups find each other through a torchft lighthouse. Every step starts a quorum
(``optimizer.zero_grad()``), gradients are averaged over the groups of that quorum (torchft's
``DistributedDataParallel``, with a communication hook that survives a failed allreduce), and the optimizer
steps only if ``manager.should_commit()`` says the step succeeded everywhere (torchft's ``Optimizer``). A group
that dies is dropped from the next quorum after the lighthouse's heartbeat timeout; the others go on without a
restart. A group that joins (or restarts) behind the others receives the modules' and optimizers' state from the
group with the highest step, over the process group (torchft's ``PGTransport``: no extra server), and then steps
in lockstep with them.

Inside a replica group this version runs one process (``max_processes = 1``), so ``Lite``'s collectives act on
that process alone; what crosses groups is torchft's (``lite.strategy.manager``). The data is split by replica
group: ``setup_dataloaders`` gives group ``i`` of ``n`` its ``i``-th share.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, ClassVar, Final

import torch

from core import ConfigurationError, Supports, hookimpl
from core.toolkit import bind_listener, check_whole, is_loopback, read_whole
from core.toolkit.strategies import SingleDeviceStrategy, set_up_part

from . import _engine
from ._ddp import FaultTolerantDDP

LIGHTHOUSE_VARIABLE: Final = "TORCHFT_LIGHTHOUSE"
"""torchft's own variable for the lighthouse address (``http://host:port``)."""
REPLICA_GROUP_VARIABLE: Final = "REPLICA_GROUP_ID"
NUM_REPLICA_GROUPS_VARIABLE: Final = "NUM_REPLICA_GROUPS"
"""The names torchft's examples use for this process's replica group and how many groups the data is split in."""
HOST_VARIABLE: Final = "CORE_TORCHFT_HOST"
"""The address this replica group listens on and advertises (its manager server and store), e.g. 127.0.0.1."""
GLOO_INTERFACE_VARIABLE: Final = "GLOO_SOCKET_IFNAME"
"""Gloo's variable for the network interface its pairs use; set to the loopback one when ``host`` is loopback."""
MANAGER_STATE_KEY: Final = "torchft_manager"
"""Where checkpoints keep the manager's step (torchft: save and restore it with the model)."""


def _duration(name: str, value: timedelta | float) -> timedelta:
    duration = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if duration.total_seconds() <= 0:
        raise ConfigurationError(f"TorchFTStrategy({name}={value!r}) must be a positive duration (seconds).")
    return duration


def _whole(name: str, value: object, minimum: int, variable: str | None = None) -> int:
    """An argument, or the text of ``variable`` when the argument was left out (``value`` is then a str)."""
    if variable is not None and isinstance(value, str):
        return read_whole(variable, value, minimum=minimum, source="torchft",
                          hint=f"set it to a whole number, or pass TorchFTStrategy({name}=...).")
    return check_whole("TorchFTStrategy", name, value, minimum)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"TorchFTStrategy({name}={value!r}): expected True or False.")
    return value


@contextlib.contextmanager
def _manager_server_on(host: str | None) -> Iterator[None]:
    """Bind the manager server that ``torchft.Manager`` starts to ``host`` instead of every interface.

    torchft 0.2's ``Manager`` builds its ``ManagerServer`` with ``bind="[::]:<port>"`` and no way to choose the
    address; it looks the class up in ``torchft.manager`` when it runs, so the address is replaced there for
    the duration of the construction.
    """
    if host is None:
        yield
        return
    manager_module = _engine.submodule("manager")
    original = manager_module.ManagerServer

    def bound(*args: Any, **kwargs: Any) -> Any:
        port = str(kwargs.get("bind", ":0")).rsplit(":", 1)[1]
        kwargs["bind"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return original(*args, **kwargs)

    setattr(manager_module, "ManagerServer", bound)  # noqa: B010 (an untyped module)
    try:
        yield
    finally:
        setattr(manager_module, "ManagerServer", original)  # noqa: B010


def _gloo_on_loopback(host: str | None) -> None:
    """Make gloo's pairs use the loopback interface when the group listens on a loopback address.

    Gloo picks its interface from ``GLOO_SOCKET_IFNAME``, else from what the host name resolves to (often the
    machine's network address), and torchft builds a new gloo group at every quorum change, so the variable is set
    for the process (only when it is unset) rather than for one group.
    """
    if host is None or not is_loopback(host.strip("[]")) or os.environ.get(GLOO_INTERFACE_VARIABLE):
        return
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if names:
        os.environ[GLOO_INTERFACE_VARIABLE] = names[0]


class TorchFTStrategy(SingleDeviceStrategy):
    """Fault-tolerant data parallelism across replica groups, through torchft (``strategy="torchft_ddp"``).

    :param lighthouse: The lighthouse address (``http://host:port``); default ``TORCHFT_LIGHTHOUSE``.
    :param replica_group: This process's replica group, a whole number (default ``REPLICA_GROUP_ID``, else 0).
        A group restarted after a failure keeps its number (and its share of the data).
    :param num_replica_groups: How many groups the data is split in (default ``NUM_REPLICA_GROUPS``, else 1).
    :param min_replica_size: Fewest groups that may commit a step.
    :param host: The address this group advertises and its manager server listens on (default
        ``CORE_TORCHFT_HOST``; else torchft's: every interface, advertised by host name). A loopback address
        (``"127.0.0.1"``) keeps a one-machine run on loopback: store, manager server and gloo's pairs.
    :param timeout: How long a collective, a commit or a state transfer may take.
    :param quorum_timeout: How long a step may wait for its quorum (longer than a step).
    :param connect_timeout: How long to wait for the lighthouse and the other groups' servers.
    :param heartbeat_interval: How often this group tells the lighthouse it is alive.
    :param use_async_quorum: Compute the quorum during the forward pass (torchft's default).
    :param max_retries: Consecutive failed commits before the run raises (``None``: retry forever).
    :param init_sync: At the first step, give every group the weights of one of them (torchft's default). A
        group that receives state contributes no gradient to that step, so with groups seeded alike pass
        ``False``: then every group's gradient counts from the first step.
    """

    name: ClassVar[str] = "torchft_ddp"
    max_processes: ClassVar[int | None] = 1
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "checkpoint_io": {"distributed"}},
        hint="torchft runs on CPUs (gloo) and CUDA GPUs, and every replica group holds the whole model.",
    )

    def __init__(
        self,
        lighthouse: str | None = None,
        replica_group: int | None = None,
        num_replica_groups: int | None = None,
        min_replica_size: int = 1,
        host: str | None = None,
        timeout: timedelta | float = timedelta(seconds=30),
        quorum_timeout: timedelta | float = timedelta(seconds=60),
        connect_timeout: timedelta | float = timedelta(seconds=60),
        heartbeat_interval: timedelta | float = timedelta(milliseconds=100),
        use_async_quorum: bool = True,
        max_retries: int | None = None,
        init_sync: bool = True,
    ) -> None:
        super().__init__()
        self.lighthouse = lighthouse
        self.replica_group = replica_group
        self.num_replica_groups = num_replica_groups
        self.min_replica_size = _whole("min_replica_size", min_replica_size, 1)
        self.host = host
        self.timeout = _duration("timeout", timeout)
        self.quorum_timeout = _duration("quorum_timeout", quorum_timeout)
        self.connect_timeout = _duration("connect_timeout", connect_timeout)
        self.heartbeat_interval = _duration("heartbeat_interval", heartbeat_interval)
        self.use_async_quorum = _flag("use_async_quorum", use_async_quorum)
        self.max_retries = None if max_retries is None else _whole("max_retries", max_retries, 0)
        self.init_sync = _flag("init_sync", init_sync)
        self._manager: Any = None
        self._process_group: Any = None
        self._store: Any = None
        self._registered = 0

    def __getstate__(self) -> dict[str, Any]:
        run_state = ("_active", "_manager", "_process_group", "_store", "_registered")
        return {key: value for key, value in self.__dict__.items() if key not in run_state}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._active, self._manager, self._process_group, self._store = None, None, None, None
        self._registered = 0

    def __repr__(self) -> str:
        return (f"TorchFTStrategy(lighthouse={self.lighthouse!r}, replica_group={self.replica_group!r}, "
                f"min_replica_size={self.min_replica_size}, host={self.host!r})")

    def unavailable_reason(self) -> str | None:
        """Why torchft cannot be used here (shown by ``python -m core.plugins --check``)."""
        return _engine.unavailable_reason()

    # ------------------------------------------------------------------------------------- settings

    def lighthouse_address(self) -> str:
        address = self.lighthouse or os.environ.get(LIGHTHOUSE_VARIABLE)
        if not address:
            raise ConfigurationError(
                f"strategy='torchft_ddp' needs a lighthouse, and neither TorchFTStrategy(lighthouse=...) nor "
                f"{LIGHTHOUSE_VARIABLE} names one. Start one (python -m core_torchft.lighthouse --min-replicas 1) "
                f"and export the {LIGHTHOUSE_VARIABLE}=http://host:port it prints."
            )
        return address

    def group(self) -> int:
        """This process's replica group."""
        if self.replica_group is not None:
            return _whole("replica_group", self.replica_group, 0)
        return _whole("replica_group", os.environ.get(REPLICA_GROUP_VARIABLE, 0), 0, REPLICA_GROUP_VARIABLE)

    def groups(self) -> int:
        """How many replica groups the data is split in."""
        if self.num_replica_groups is not None:
            count = _whole("num_replica_groups", self.num_replica_groups, 1)
        else:
            count = _whole("num_replica_groups", os.environ.get(NUM_REPLICA_GROUPS_VARIABLE, 1), 1,
                           NUM_REPLICA_GROUPS_VARIABLE)
        if self.group() >= count:
            raise ConfigurationError(
                f"replica group {self.group()} is outside num_replica_groups={count}: groups are numbered 0 to "
                f"{count - 1}. Set {NUM_REPLICA_GROUPS_VARIABLE} (or TorchFTStrategy(num_replica_groups=...)) to the "
                f"number of groups you start."
            )
        return count

    def listen_host(self) -> str | None:
        return self.host or os.environ.get(HOST_VARIABLE) or None

    @property
    def manager(self) -> Any:
        """This replica group's ``torchft.Manager`` (``current_step()``, ``num_participants()``, ``allreduce``)."""
        if self._manager is None:
            raise ConfigurationError(
                "strategy='torchft_ddp' has no manager yet: it is created when the run starts (inside lite.launch)."
            )
        return self._manager

    # ------------------------------------------------------------------------------------ processes

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        self.lighthouse_address()
        self.groups()  # checks the group numbers before anything starts
        return function(*args, **kwargs)

    @hookimpl
    def strategy_setup_environment(self) -> None:
        torchft = _engine.load()
        transport = _engine.submodule("checkpointing.pg_transport").PGTransport
        host = self.listen_host()
        _gloo_on_loopback(host)
        advertised = host or socket.gethostname()
        # The replica group's store, on a socket bound before anyone connects (port 0: the OS picks).
        listener = bind_listener(advertised, 0)
        port = int(listener.getsockname()[1])
        self._store = torch.distributed.TCPStore(
            advertised, port, 1, True, timeout=self.timeout, wait_for_workers=False,
            master_listen_fd=listener.detach(),
        )
        backend = self.active.hook.accelerator_process_group_backend() or "gloo"
        group_class = torchft.ProcessGroupNCCL if backend == "nccl" else torchft.ProcessGroupGloo
        self._process_group = group_class(timeout=self.timeout)
        device = self.active.device or torch.device("cpu")
        with _manager_server_on(host):
            self._manager = torchft.Manager(
                pg=self._process_group,
                load_state_dict=None,
                state_dict=None,
                min_replica_size=self.min_replica_size,
                use_async_quorum=self.use_async_quorum,
                timeout=self.timeout,
                quorum_timeout=self.quorum_timeout,
                connect_timeout=self.connect_timeout,
                rank=0,
                world_size=1,
                store_addr=advertised,
                store_port=port,
                lighthouse_addr=self.lighthouse_address(),
                replica_id=f"core_torchft_{self.group()}",
                hostname=advertised,
                heartbeat_interval=self.heartbeat_interval,
                checkpoint_transport=transport(self._process_group, timeout=self.timeout, device=device),
                max_retries=self.max_retries,
                init_sync=self.init_sync,
            )

    @hookimpl
    def strategy_teardown(self) -> None:
        manager, group = self._manager, self._process_group
        self._manager, self._process_group, self._store, self._registered = None, None, None, 0
        if manager is not None:
            manager.shutdown(wait=False)
        if group is not None:
            with contextlib.suppress(Exception):
                group.shutdown()

    # ---------------------------------------------------------------------------------- model, optimizer

    def _register(self, what: str, load: Callable[[Any], Any], save: Callable[[], Any]) -> None:
        """What a group that joins behind the others receives from the one with the highest step."""
        self.manager.register_state_dict_fn(f"{what}-{self._registered}", load, save)
        self._registered += 1

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self._register("module", module.load_state_dict, module.state_dict)
        return FaultTolerantDDP(self.manager, module)

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        torchft = _engine.load()
        self._register("optimizer", optimizer.load_state_dict, optimizer.state_dict)
        wrapped: torch.optim.Optimizer = torchft.Optimizer(self.manager, optimizer)
        return wrapped

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        return set_up_part(module, FaultTolerantDDP, self.name).no_sync()

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        groups = self.groups()
        return {"num_replicas": groups, "rank": self.group()} if groups > 1 else None

    # ---------------------------------------------------------------------------------------- checkpoints

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        if self._manager is not None:  # torchft: the manager's step travels with the weights
            state = {**state, MANAGER_STATE_KEY: self._manager.state_dict()}
        self.active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        loaded: dict[str, Any] = self.active.hook.checkpoint_io_load(
            path=path, map_location="cpu", weights_only=weights_only
        )
        manager_state = loaded.pop(MANAGER_STATE_KEY, None)
        if manager_state is not None and self._manager is not None:
            self._manager.load_state_dict(manager_state)
        return loaded
