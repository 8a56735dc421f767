"""The ``horovod`` environment: ranks started by ``horovodrun`` (Gloo or MPI controller).

``horovodrun`` exports ``HOROVOD_RANK``, ``HOROVOD_SIZE``, ``HOROVOD_LOCAL_RANK``, ``HOROVOD_LOCAL_SIZE`` and
``HOROVOD_CROSS_RANK`` (the node) to every rank, so the ranks are known without communication, and a script
run with ``Lite(strategy="horovod")`` needs no ``devices=``: the launcher's ``-np`` decides. For strategies
that use ``torch.distributed`` under horovodrun (``ddp``), the rendezvous port is derived from horovodrun's own
rendezvous address, the same in every rank and different for every horovodrun.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from typing import Final

import attrs

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import read_whole

VARIABLES: Final = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")


@attrs.frozen
class HorovodRanks:
    """What horovodrun told this process."""

    global_rank: int
    world_size: int
    local_rank: int
    local_size: int
    node_rank: int
    rendezvous: str

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_size


def _integer(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None and default is not None:
        return default
    return read_whole(name, "" if raw is None else raw, source="Horovod", hint="horovodrun sets it for every rank.")


def read_ranks(environ: Mapping[str, str] | None = None) -> HorovodRanks:
    """The ranks horovodrun exported; :class:`core.ConfigurationError` when one is missing or malformed."""
    environ = os.environ if environ is None else environ
    address = environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")
    port = environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "")
    return HorovodRanks(
        global_rank=_integer(environ, "HOROVOD_RANK"),
        world_size=_integer(environ, "HOROVOD_SIZE"),
        local_rank=_integer(environ, "HOROVOD_LOCAL_RANK"),
        local_size=_integer(environ, "HOROVOD_LOCAL_SIZE"),
        node_rank=_integer(environ, "HOROVOD_CROSS_RANK", default=0),
        rendezvous=f"{address}:{port}",
    )


def derived_port(rendezvous: str) -> int:
    """A port in 20000..29999 that every rank of one horovodrun computes alike."""
    return 20000 + zlib.crc32(rendezvous.encode()) % 10000


class HorovodEnvironment:
    """Processes started by ``horovodrun``; claimed before SLURM, since horovodrun may run inside a job."""

    kind: Final = "environment"
    name: Final = "horovod"
    priority: Final = 450  # after torchelastic (500), before slurm (400), lsf (300) and mpi (200)

    @hookimpl
    def environment_detect(self) -> object | None:
        return self if all(name in os.environ for name in VARIABLES) else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_processes_per_node(self) -> int:
        return read_ranks().local_size

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        ranks = read_ranks()
        address = os.environ.get("MASTER_ADDR") or os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or "127.0.0.1"
        explicit_port = os.environ.get("MASTER_PORT", "")
        port = int(explicit_port) if explicit_port.isdigit() else derived_port(ranks.rendezvous)
        return ClusterInfo(
            world_size=ranks.world_size,
            global_rank=ranks.global_rank,
            local_rank=ranks.local_rank,
            node_rank=ranks.node_rank,
            main_address=address,
            main_port=port,
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        ranks = read_ranks()
        if ranks.local_size != devices_per_node:
            raise ConfigurationError(
                f"devices={devices_per_node} per node was requested, but horovodrun started {ranks.local_size} "
                f"processes on this node. Leave devices='auto' (the launcher decides), pass "
                f"devices={ranks.local_size}, or start horovodrun -np {devices_per_node * num_nodes}."
            )
        if ranks.world_size != devices_per_node * num_nodes:
            raise ConfigurationError(
                f"devices x num_nodes = {devices_per_node} x {num_nodes} = {devices_per_node * num_nodes} "
                f"processes were requested, but horovodrun started {ranks.world_size}. Pass "
                f"num_nodes={ranks.num_nodes}, or start horovodrun -np {devices_per_node * num_nodes}."
            )
