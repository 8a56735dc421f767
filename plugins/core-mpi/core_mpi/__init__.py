"""The MPI cluster environment for core: ranks from the variables ``mpirun`` sets, without mpi4py."""

from __future__ import annotations

from core_mpi._environment import MPIEnvironment
from core_mpi._variables import FLAVOURS, MPIRanks, read_ranks, rendezvous_port

__all__ = ["FLAVOURS", "MPIEnvironment", "MPIRanks", "read_ranks", "rendezvous_port"]
