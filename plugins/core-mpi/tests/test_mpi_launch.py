"""The mpi environment under a real Open MPI ``mpirun`` on this machine."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mpirunner import PROBE, MpiRun, mpirun


def reports(result: MpiRun) -> list[dict[str, Any]]:
    return sorted(result.reports(), key=lambda report: report.get("global_rank", -1))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_mpirun_ranks_are_detected_without_mpi4py() -> None:
    result = mpirun(2, [sys.executable, str(PROBE), "2", "1"])
    found = reports(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["environment"] for r in found] == ["mpi", "mpi"]
    assert [(r["global_rank"], r["local_rank"], r["node_rank"], r["world_size"]) for r in found] == [
        (0, 0, 0, 2), (1, 1, 0, 2),
    ]
    assert {r["main_address"] for r in found} == {"127.0.0.1"}
    (port,) = {r["main_port"] for r in found}  # agreed without talking
    assert 20000 <= port < 30000
    assert all(r["externally"] is True for r in found)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_each_mpirun_gets_its_own_port_unless_master_port_is_set() -> None:
    # The environment alone, without resolving a run: no torch import, so three launches stay quick.
    snippet = "from core_mpi import MPIEnvironment; print(MPIEnvironment().environment_cluster_info(2, 1).main_port)"

    def ports(**env: str) -> set[str]:
        result = mpirun(2, [sys.executable, "-c", snippet], env=env)
        assert result.returncode == 0, result.stderr
        return {line for output in result.ranks for line in output.split()}

    first, second = ports(), ports()
    assert len(first) == 1 and len(second) == 1 and first != second, (first, second)
    assert ports(MASTER_PORT="29999") == {"29999"}


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_mpirun_with_the_wrong_device_count_names_both_numbers() -> None:
    # The environment's own hook, without resolving a run (no torch import: a quick launch).
    snippet = (
        "from core import CoreError; from core_mpi import MPIEnvironment\n"
        "try: MPIEnvironment().environment_validate_settings(devices_per_node=1, num_nodes=1)\n"
        "except CoreError as error: print(error)"
    )
    result = mpirun(2, [sys.executable, "-c", snippet])
    assert result.returncode == 0, result.stdout + result.stderr
    assert [output.splitlines() for output in result.ranks] == [[
        "devices=1 per node was requested, but Open MPI started 2 processes on this node. "
        "Make them agree: devices=2, or mpirun --npernode 1."
    ]] * 2
