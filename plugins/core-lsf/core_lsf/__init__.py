"""The LSF cluster environment for core: processes started by IBM's ``jsrun`` (Job Step Manager)."""

from __future__ import annotations

from ._environment import LSFEnvironment, compute_hosts

__all__ = ["LSFEnvironment", "compute_hosts"]
