"""Where the ranks of a process group meet: a TCP store on the main address, with a key prefix per run.

**Processes this strategy starts itself** (one node): the launching process creates the store before it
starts any rank, on a listening socket it binds itself (the port the environment proposed, or any free port
if that one was taken meanwhile), and keeps it for the job. The ranks, including the launcher's own rank 0,
connect to it as clients. No rank ever binds a port that another program might have taken since it was
chosen, and every rank checks that the store it reached holds its own job's id (``CORE_DDP_JOB``), so a
rank sent to another job's store fails at once with :class:`RendezvousError` instead of inside gloo. (The
variable and the store's keys keep the names core-ddp gave them when this code was its own: launchers and test
harnesses outside this package know them.)

**Processes started by someone else** (torchrun, srun, mpirun, several nodes by hand): their conventions are
kept. Global rank 0 serves the store on ``MASTER_PORT`` (or torchrun's agent does), the others connect.

A script may run several times in one process (two ``Lite`` objects one after the other). A module from
the first run can keep that run's process group, and with it the store's server, alive. The stores are
``multi_tenant``, so a second store on the same port shares the live server instead of failing to bind, and
each run writes under its own prefix, so the first run's keys cannot confuse the second. All processes of
a job run the same script, so the n-th run of each uses the same prefix.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import Counter
from datetime import timedelta
from typing import Final

import attrs
import torch.distributed as dist

from core import ClusterInfo, CoreError
from core.toolkit import bind_listener, is_loopback, take_inherited_listener

JOB_VARIABLE: Final = "CORE_DDP_JOB"
"""The id of the job whose launcher hosts the store; set in every rank the strategy starts."""
JOB_KEY: Final = "core-ddp/job"
_AGENT_STORE_VARIABLE: Final = "TORCHELASTIC_USE_AGENT_STORE"
_RESTART_COUNT_VARIABLE: Final = "TORCHELASTIC_RESTART_COUNT"

# How many runs this process has set up per (address, port, world size): the n-th run of every rank of a job
# takes the same key prefix. A count of this process's life, like its pid, not state of one run or launcher.
_runs: Counter[tuple[str, int, int]] = Counter()


class RendezvousError(CoreError, RuntimeError):
    """A rank reached a store that is not its job's, or could not reach one at all."""


@attrs.frozen
class HostedStore:
    """The store a launching process serves for the ranks it starts."""

    store: dist.TCPStore
    port: int
    job_id: str


def host_store(address: str, proposed_port: int, world_size: int, timeout: timedelta) -> HostedStore:
    """Serve the job's store from this (launching) process; the ranks it starts connect to it.

    :param address: The main address (the ranks connect there).
    :param proposed_port: The port the environment proposed; if it was taken since, any free port is used.
    :return: The store, the port it listens on and the job's id, already written into the store. The caller (the
        launcher) keeps it for as long as the job runs.
    """
    try:
        listener = bind_listener(address, proposed_port)
    except OSError:  # taken since it was proposed: the race this design closes; any free port will do
        listener = bind_listener(address, 0)
    port = int(listener.getsockname()[1])
    store = dist.TCPStore(
        address, port, world_size, True, timeout=timeout, wait_for_workers=False, multi_tenant=True,
        master_listen_fd=listener.detach(),
    )
    job_id = f"{uuid.uuid4().hex}-{os.getpid()}"  # the launcher's pid: see _own_job
    store.set(JOB_KEY, job_id)
    return HostedStore(store, port, job_id)


def _listen_fd(address: str, port: int) -> int | None:
    """The listening socket global rank 0's store serves on, or None to let the store bind one itself.

    Preferably the one the launcher bound before starting this process (``python -m core.run``); else, when
    the whole job runs on this machine, one bound to the loopback address only (TCPStore's own server
    listens on every interface). When a store of this process already serves the port (a second run),
    binding fails and the store reuses that server, as before.
    """
    inherited = take_inherited_listener()
    if inherited is not None:
        return inherited
    if not is_loopback(address):
        return None
    try:
        listener = bind_listener(address, port)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        listener.set_inheritable(False)
    return listener.detach()  # the store owns the descriptor from here on


def _check_job(store: dist.Store, cluster: ClusterInfo, job_id: str, prefix: str) -> None:
    where = f"{cluster.main_address}:{cluster.main_port}"
    found = store.get(JOB_KEY).decode() if store.check([JOB_KEY]) else None
    if found != job_id:
        what = "a store of another program" if found is None else f"the store of another job ({found})"
        raise RendezvousError(
            f"{prefix}: global rank {cluster.global_rank} of job {job_id} reached {what} at {where}, not its "
            f"launcher's. MASTER_ADDR/MASTER_PORT or {JOB_VARIABLE} in this process's environment come from "
            f"another run; start the job again from a clean environment (unset them), or let the launcher choose."
        )


def _own_job() -> str | None:
    """This process's job id, if its launcher is this process or its parent; else None.

    A process that inherited the variable through something else (a test runner that once launched a job in
    process, then mpirun) is not part of that job: it follows its own launcher's conventions instead.
    """
    job_id = os.environ.get(JOB_VARIABLE)
    if not job_id:
        return None
    _, _, launcher = job_id.rpartition("-")
    return job_id if launcher.isdigit() and int(launcher) in _ancestors() else None


def _ancestors() -> set[int]:
    """This process, its parent, and its grandparent when the parent is a multiprocessing forkserver (which
    sits between a launcher and the ranks it starts with ``forkserver``). Not further: a test runner that once
    launched a job itself and later starts mpirun is mpirun's parent, not a launcher of mpirun's ranks."""
    found = {os.getpid(), os.getppid()}
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            is_forkserver = b"forkserver" in cmdline.read()
        if is_forkserver:
            with open(f"/proc/{parent}/stat", "rb") as stat:
                found.add(int(stat.read().rsplit(b")", 1)[1].split()[1]))
    except (OSError, ValueError, IndexError):
        pass
    return found


def store_for(cluster: ClusterInfo, timeout: timedelta, prefix: str) -> dist.Store:
    """The store of this run, under a new key prefix: the launcher's (a client of it) or global rank 0's.

    :param prefix: What messages start with (the strategy's distribution, ``core-ddp``).
    """
    key = (cluster.main_address, cluster.main_port, cluster.world_size)
    run = _runs[key]
    _runs[key] += 1
    job_id = _own_job()
    if job_id:
        try:
            store = dist.TCPStore(cluster.main_address, cluster.main_port, cluster.world_size, False, timeout=timeout)
        except (RuntimeError, TimeoutError) as error:  # DistNetworkError and DistStoreError are RuntimeErrors
            raise RendezvousError(
                f"{prefix}: global rank {cluster.global_rank} of job {job_id} could not reach its launcher's store "
                f"at {cluster.main_address}:{cluster.main_port} ({type(error).__name__}: {error}). Did the "
                f"launching process exit? Its output says why."
            ) from error
        _check_job(store, cluster, job_id, prefix)
        return dist.PrefixStore(f"core-ddp/job-{job_id}/run-{run}/", store)
    # Under torchrun the agent already serves a store on MASTER_PORT; every rank is a client of it.
    serves = cluster.global_rank == 0 and os.environ.get(_AGENT_STORE_VARIABLE) != "True"
    listen_fd = _listen_fd(cluster.main_address, cluster.main_port) if serves else None
    store = dist.TCPStore(
        cluster.main_address, cluster.main_port, cluster.world_size, serves, timeout=timeout, multi_tenant=True,
        master_listen_fd=listen_fd,
    )
    # torchrun's agent keeps its store across restarts (--max-restarts): each attempt needs fresh keys too,
    # or the restarted ranks would read the dead ranks' addresses.
    attempt = os.environ.get(_RESTART_COUNT_VARIABLE, "0")
    return dist.PrefixStore(f"core-ddp/attempt-{attempt}/run-{run}/", store)
