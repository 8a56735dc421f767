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

from core import ClusterInfo, hookimpl
from core.toolkit import Launched, LauncherVariables, check_layout, cluster_info_from

VARIABLES: Final = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")
HOROVODRUN: Final = LauncherVariables(
    launcher="Horovod",
    malformed="horovodrun sets it for every rank.",
    unset="{name} is not set; horovodrun sets it for every rank: start the script with horovodrun -np N.",
)


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


def read_ranks(environ: Mapping[str, str] | None = None) -> HorovodRanks:
    """The ranks horovodrun exported; :class:`core.ConfigurationError` when one is missing or malformed."""
    environ = os.environ if environ is None else environ
    address = environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")
    port = environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "")
    return HorovodRanks(
        global_rank=HOROVODRUN.read("HOROVOD_RANK", environ=environ),
        world_size=HOROVODRUN.read("HOROVOD_SIZE", environ=environ),
        local_rank=HOROVODRUN.read("HOROVOD_LOCAL_RANK", environ=environ),
        local_size=HOROVODRUN.read("HOROVOD_LOCAL_SIZE", environ=environ),
        node_rank=HOROVODRUN.read("HOROVOD_CROSS_RANK", 0, environ=environ),
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
        return cluster_info_from(ranks, address, port)

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        ranks = read_ranks()
        processes = devices_per_node * num_nodes
        check_layout(
            devices_per_node,
            num_nodes,
            per_node=Launched(
                ranks.local_size,
                f"horovodrun started {ranks.local_size} processes on this node",
                f"Leave devices='auto' (the launcher decides), pass devices={ranks.local_size}, or start "
                f"horovodrun -np {processes}.",
            ),
            world_size=Launched(
                ranks.world_size,
                f"horovodrun started {ranks.world_size}",
                f"Pass num_nodes={ranks.num_nodes}, or start horovodrun -np {processes}.",
            ),
        )
