"""Where the ranks of a process group meet: a TCP store on the main address, with a key prefix per run.

A script may run several times in one process (two ``Lite`` objects one after the other). A module from
the first run can keep that run's process group, and with it the store's server, alive. The stores are
``multi_tenant``, so a second store on the same port shares the live server instead of failing to bind, and
each run writes under its own prefix, so the first run's keys cannot confuse the second. All processes of
a job run the same script, so the n-th run of each uses the same prefix.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from typing import Final

import torch.distributed as dist

from core import ClusterInfo

_AGENT_STORE_VARIABLE: Final = "TORCHELASTIC_USE_AGENT_STORE"
_RESTART_COUNT_VARIABLE: Final = "TORCHELASTIC_RESTART_COUNT"

_runs: Counter[tuple[str, int, int]] = Counter()


def store_for(cluster: ClusterInfo, timeout: timedelta) -> dist.Store:
    """The store of this run: global rank 0 serves it (unless torchrun's agent does), under a new prefix."""
    key = (cluster.main_address, cluster.main_port, cluster.world_size)
    run = _runs[key]
    _runs[key] += 1
    # Under torchrun the agent already serves a store on MASTER_PORT; every rank is a client of it.
    serves = cluster.global_rank == 0 and os.environ.get(_AGENT_STORE_VARIABLE) != "True"
    store = dist.TCPStore(
        cluster.main_address, cluster.main_port, cluster.world_size, serves, timeout=timeout, multi_tenant=True
    )
    # torchrun's agent keeps its store across restarts (--max-restarts): each attempt needs fresh keys too,
    # or the restarted ranks would read the dead ranks' addresses.
    attempt = os.environ.get(_RESTART_COUNT_VARIABLE, "0")
    return dist.PrefixStore(f"core-ddp/attempt-{attempt}/run-{run}/", store)
