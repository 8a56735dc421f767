"""Where the ranks of a process group meet: one TCP store per address, reused by every run of a process.

A script may run several times in one process (two ``Lite`` objects one after the other). A module from
the first run keeps its process group, and with it the store, alive; a second store on the same port
could not be served, and the first run's keys would confuse the second. So each process keeps the store
it made for an address and gives every run its own key prefix. All processes of a job run the same
script, so the n-th run of each uses the same prefix.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from typing import Final

import torch.distributed as dist

from core import ClusterInfo

_AGENT_STORE_VARIABLE: Final = "TORCHELASTIC_USE_AGENT_STORE"

_stores: dict[tuple[str, int, int], dist.Store] = {}
_runs: Counter[tuple[str, int, int]] = Counter()


def store_for(cluster: ClusterInfo, timeout: timedelta) -> dist.Store:
    """The store of this run: the process's store for the address, under a prefix new for each run."""
    key = (cluster.main_address, cluster.main_port, cluster.world_size)
    store = _stores.get(key)
    if store is None:
        # Under torchrun the agent already serves a store on MASTER_PORT; every rank is a client of it.
        serves = cluster.global_rank == 0 and os.environ.get(_AGENT_STORE_VARIABLE) != "True"
        store = dist.TCPStore(
            cluster.main_address, cluster.main_port, cluster.world_size, serves, timeout=timeout, multi_tenant=True
        )
        _stores[key] = store
    run = _runs[key]
    _runs[key] += 1
    return dist.PrefixStore(f"core-ddp/run-{run}/", store)
