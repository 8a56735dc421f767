"""Where the ranks of a process group meet: a TCP store on the main address, with a key prefix per run.

A script may run several times in one process (two ``Lite`` objects one after the other). A module from
the first run can keep that run's process group, and with it the store's server, alive. The stores are
``multi_tenant``, so a second store on the same port shares the live server instead of failing to bind, and
each run writes under its own prefix, so the first run's keys cannot confuse the second. All processes of
a job run the same script, so the n-th run of each uses the same prefix.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections import Counter
from datetime import timedelta
from typing import Final

import torch.distributed as dist

from core import ClusterInfo

_AGENT_STORE_VARIABLE: Final = "TORCHELASTIC_USE_AGENT_STORE"
_RESTART_COUNT_VARIABLE: Final = "TORCHELASTIC_RESTART_COUNT"

_runs: Counter[tuple[str, int, int]] = Counter()


def _loopback_listener(address: str, port: int) -> int | None:
    """A listening socket on a loopback main address, handed to the store; None to let the store bind.

    TCPStore's server listens on every interface of the machine. When the whole job runs on this machine (the
    main address is 127.0.0.1 or ::1), nothing outside it needs to reach the store, so it listens on the
    loopback address only. When a store of this process already serves the port (a second run), binding fails
    and the store reuses that server, as before.
    """
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = address == "localhost"
        address = "127.0.0.1" if loopback else address
    if not loopback:
        return None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        return None
    with contextlib.suppress(OSError):
        listener.set_inheritable(False)
    return listener.detach()  # the store owns the descriptor from here on


def store_for(cluster: ClusterInfo, timeout: timedelta) -> dist.Store:
    """The store of this run: global rank 0 serves it (unless torchrun's agent does), under a new prefix."""
    key = (cluster.main_address, cluster.main_port, cluster.world_size)
    run = _runs[key]
    _runs[key] += 1
    # Under torchrun the agent already serves a store on MASTER_PORT; every rank is a client of it.
    serves = cluster.global_rank == 0 and os.environ.get(_AGENT_STORE_VARIABLE) != "True"
    listen_fd = _loopback_listener(cluster.main_address, cluster.main_port) if serves else None
    store = dist.TCPStore(
        cluster.main_address, cluster.main_port, cluster.world_size, serves, timeout=timeout, multi_tenant=True,
        master_listen_fd=listen_fd,
    )
    # torchrun's agent keeps its store across restarts (--max-restarts): each attempt needs fresh keys too,
    # or the restarted ranks would read the dead ranks' addresses.
    attempt = os.environ.get(_RESTART_COUNT_VARIABLE, "0")
    return dist.PrefixStore(f"core-ddp/attempt-{attempt}/run-{run}/", store)
