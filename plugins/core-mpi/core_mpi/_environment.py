"""The ``mpi`` environment: processes started by ``mpirun`` / ``mpiexec``; no mpi4py, no MPI_Init.

The rendezvous is agreed without any communication:

- address: ``MASTER_ADDR`` when set; else ``127.0.0.1`` when the whole job runs on one node; else, for
  Open MPI, the host of ``mpirun`` itself (from ``OMPI_MCA_orte_hnp_uri``), where rank 0 runs when mpirun
  is started on the first node of the allocation, as batch systems do; else an error asking for
  ``MASTER_ADDR`` (``mpirun -x MASTER_ADDR=$(hostname)``).
- port: ``MASTER_PORT`` when set; else ``20000 + crc32(job id) % 10000`` from the launcher's job identifier,
  the same in every rank and different for each ``mpirun``.
"""

from __future__ import annotations

import os
from typing import Final

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import ExportedVariables, Launched, LauncherVariables, check_layout, cluster_info_from

from ._variables import MPIRanks, detect_flavour, hnp_address, read_ranks, rendezvous_port

LOOPBACK: Final = "127.0.0.1"
RENDEZVOUS: Final = LauncherVariables(launcher="environment", malformed="set MASTER_PORT to a port every rank shares.")


def main_address(ranks: MPIRanks) -> str:
    explicit = os.environ.get("MASTER_ADDR", "").strip()
    if explicit:
        return explicit
    if ranks.local_size == ranks.world_size:
        return LOOPBACK
    launcher_host = hnp_address(os.environ)
    if launcher_host is not None:
        return launcher_host
    raise ConfigurationError(
        f"This {ranks.flavour} job spans {ranks.num_nodes} nodes and the address of rank 0 cannot be known "
        f"without communication. Export it to every rank: mpirun -x MASTER_ADDR=$(hostname) ... (Open MPI) or "
        f"mpiexec -genv MASTER_ADDR $(hostname) ... (MPICH)."
    )


def main_port(ranks: MPIRanks) -> int:
    explicit = RENDEZVOUS.read_if_set("MASTER_PORT")
    if explicit is not None:
        return explicit
    if ranks.job_id is None:
        raise ConfigurationError(
            f"{ranks.flavour} set no job identifier to derive a shared port from. Export one to every rank: "
            f"mpirun -x MASTER_PORT=29500 ..."
        )
    return rendezvous_port(ranks.job_id)


class MPIEnvironment:
    """Ranks from Open MPI, MPICH (Hydra), Intel MPI or MVAPICH2 variables."""

    kind: Final = "environment"
    name: Final = "mpi"
    priority: Final = 200

    def __init__(self) -> None:
        self._exported = ExportedVariables()

    @hookimpl
    def environment_detect(self) -> object | None:
        return self if detect_flavour() is not None else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        ranks = read_ranks()
        address, port = main_address(ranks), main_port(ranks)
        self._exported.set_rendezvous(address, port)
        return cluster_info_from(ranks, address, port)

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        ranks = read_ranks()
        check_layout(
            devices_per_node,
            num_nodes,
            per_node=Launched(
                ranks.local_size,
                f"{ranks.flavour} started {ranks.local_size} processes on this node",
                f"Make them agree: devices={ranks.local_size}, or mpirun --npernode {devices_per_node}.",
            ),
            world_size=Launched(
                ranks.world_size,
                f"{ranks.flavour} started {ranks.world_size} processes in all",
                f"Make them agree: num_nodes={ranks.num_nodes}, or mpirun -n {devices_per_node * num_nodes}.",
            ),
        )

    @hookimpl
    def environment_teardown(self) -> None:
        self._exported.restore()

