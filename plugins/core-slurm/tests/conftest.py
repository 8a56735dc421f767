"""Fixtures of the core-slurm tests: ``slurm_cluster``, a private SLURM cluster shared by the session.

The machinery lives in slurm_cluster.py (a uniquely named module, so that test files can import its
types: several plugins' test directories have a conftest.py, and ``from conftest import`` would pick any).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurm_cluster import SlurmCluster, private_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd on loopback, started at first use and stopped at the end of the session."""
    with private_cluster() as cluster:
        yield cluster
