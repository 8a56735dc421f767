"""What each MPI launcher tells its processes, read without initialising MPI.

=========  ========================  ========================  ============================  ==========================
flavour    world size                global rank               local rank / local size       job identifier
=========  ========================  ========================  ============================  ==========================
Open MPI   OMPI_COMM_WORLD_SIZE      OMPI_COMM_WORLD_RANK      OMPI_COMM_WORLD_LOCAL_RANK /  OMPI_MCA_ess_base_jobid,
                                                               OMPI_COMM_WORLD_LOCAL_SIZE    PMIX_NAMESPACE
MVAPICH2   MV2_COMM_WORLD_SIZE       MV2_COMM_WORLD_RANK       MV2_COMM_WORLD_LOCAL_RANK /   MPIRUN_ID
                                                               MV2_COMM_WORLD_LOCAL_SIZE
MPICH      PMI_SIZE                  PMI_RANK                  MPI_LOCALRANKID /             PMI_KVSNAME, PMI_JOBID
(Hydra),                                                       MPI_LOCALNRANKS
Intel MPI
=========  ========================  ========================  ============================  ==========================

The node rank is ``global_rank // local_size``: launchers place ranks node by node by default (Open MPI's
``--map-by slot``/``core``, Hydra's block placement), and ranks must be laid out so for DDP anyway. Open MPI's
``OMPI_COMM_WORLD_NODE_RANK`` is not a node index (it is the rank among this node's processes of all jobs).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from typing import Final

import attrs

from core import ConfigurationError
from core.toolkit import LauncherVariables


@attrs.frozen
class Flavour:
    """The variable names of one MPI implementation."""

    name: str
    size: str
    rank: str
    local_rank: str
    local_size: str
    job_ids: tuple[str, ...]

    @property
    def variables(self) -> LauncherVariables:
        """How its variables are read: errors name the flavour and say that mpirun sets them."""
        return LauncherVariables(
            launcher=self.name,
            malformed="mpirun sets it to one.",
            unset="{name} is not set; mpirun sets it in every rank it starts.",
        )


FLAVOURS: Final = (
    Flavour("Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE", ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE")),
    Flavour("MVAPICH2", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
            "MV2_COMM_WORLD_LOCAL_SIZE", ("MPIRUN_ID",)),
    Flavour("MPICH", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", ("PMI_KVSNAME", "PMI_JOBID")),
)
"""Checked in this order: MVAPICH2 and Open MPI also set PMI_* in some builds, never the reverse."""

PORT_BASE: Final = 20000
PORT_SPAN: Final = 10000


@attrs.frozen
class MPIRanks:
    """One process's place in the MPI job."""

    flavour: str
    world_size: int
    global_rank: int
    local_rank: int
    local_size: int
    job_id: str | None

    @property
    def node_rank(self) -> int:
        return self.global_rank // self.local_size

    @property
    def num_nodes(self) -> int:
        return -(-self.world_size // self.local_size)


def detect_flavour(environ: Mapping[str, str] | None = None) -> Flavour | None:
    """The MPI implementation that started this process, from its world-size variable, or ``None``."""
    environ = os.environ if environ is None else environ
    return next((flavour for flavour in FLAVOURS if environ.get(flavour.size)), None)


def read_ranks(environ: Mapping[str, str] | None = None) -> MPIRanks:
    """This process's ranks; :class:`core.ConfigurationError` when no MPI launcher started it."""
    environ = os.environ if environ is None else environ
    flavour = detect_flavour(environ)
    if flavour is None:
        names = ", ".join(f.size for f in FLAVOURS)
        raise ConfigurationError(
            f"None of {names} is set, so no MPI launcher started this process. Start it with "
            f"`mpirun -n N python script.py`, or pick another environment."
        )
    variables = flavour.variables
    world_size = variables.read(flavour.size, environ=environ)
    global_rank = variables.read(flavour.rank, environ=environ)
    if flavour.local_rank in environ and flavour.local_size in environ:
        local_rank = variables.read(flavour.local_rank, environ=environ)
        local_size = variables.read(flavour.local_size, environ=environ)
    else:
        # A launcher that says nothing about nodes: one node (the common Hydra case without MPI_LOCALRANKID).
        local_rank, local_size = global_rank, world_size
    job_id = next((environ[name] for name in flavour.job_ids if environ.get(name)), None)
    if not (0 <= global_rank < world_size and 0 <= local_rank < local_size <= world_size):
        raise ConfigurationError(
            f"Inconsistent {flavour.name} ranks: {flavour.rank}={global_rank}, {flavour.size}={world_size}, "
            f"{flavour.local_rank}={local_rank}, {flavour.local_size}={local_size}."
        )
    return MPIRanks(flavour.name, world_size, global_rank, local_rank, local_size, job_id)


def rendezvous_port(job_id: str) -> int:
    """A port every rank derives from the job identifier alone: ``20000 + crc32(job id) % 10000``."""
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def hnp_address(environ: Mapping[str, str]) -> str | None:
    """The first TCP address of Open MPI's ``mpirun`` (``OMPI_MCA_orte_hnp_uri="id;tcp://10.1.2.3:4567;..."``)."""
    uri = environ.get("OMPI_MCA_orte_hnp_uri", "")
    for part in uri.split(";"):
        if part.startswith("tcp://"):
            host = part[len("tcp://"):].rsplit(":", 1)[0]
            return host or None
    return None
