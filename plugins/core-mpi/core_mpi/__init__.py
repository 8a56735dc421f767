"""The MPI cluster environment for core: ranks from the variables ``mpirun`` sets, without mpi4py."""

from __future__ import annotations

from ._environment import MPIEnvironment
from ._variables import FLAVOURS, MPIRanks, hnp_address, read_ranks, rendezvous_port

__all__ = ["FLAVOURS", "MPIEnvironment", "MPIRanks", "hnp_address", "read_ranks", "rendezvous_port"]
