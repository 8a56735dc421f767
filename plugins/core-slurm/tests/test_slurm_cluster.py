"""The slurm environment under a real srun, sbatch and salloc-style job on the private cluster (conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster, json_reports

PROBE = Path(__file__).with_name("environment_probe.py")
# The environment's own hooks without resolving a run: no torch import, so a launch costs well under a second.
# Auto-detection as core.resolve runs it, without resolving a run (no torch): the alias, then any CoreWarning.
DETECT = """
import warnings
import core
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(core.detect_environment())
for warning in caught:
    if issubclass(warning.category, core.CoreWarning):
        print("warning:", warning.message)
"""
VALIDATE = """
import sys, warnings
from core import CoreError
from core_slurm import SLURMEnvironment
warnings.simplefilter("always")
environment = SLURMEnvironment()
print("detected" if environment.environment_detect() is environment else "not detected")
try:
    environment.environment_validate_settings(devices_per_node=int(sys.argv[1]), num_nodes=int(sys.argv[2]))
    print("valid")
except CoreError as error:
    print("error:", error)
"""


def probe_lines(output: str) -> list[dict[str, Any]]:
    return sorted(
        json_reports(output),
        key=lambda report: report.get("global_rank", -1),
    )


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_srun_two_tasks_are_detected_as_slurm_with_their_ranks(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.srun(
        ["--nodes=1", "--ntasks-per-node=2", "--job-name=probe", sys.executable, str(PROBE), "2", "1"]
    )
    reports = probe_lines(result.stdout)
    job_id = reports[0]["exported"]["MASTER_PORT"]  # checked below against the job's own id
    assert [r["environment"] for r in reports] == ["slurm", "slurm"], result.stdout + result.stderr
    assert [(r["global_rank"], r["local_rank"], r["node_rank"]) for r in reports] == [(0, 0, 0), (1, 1, 0)]
    assert {r["world_size"] for r in reports} == {2}
    assert {r["main_address"] for r in reports} == {"localhost"}
    assert all(r["externally"] is True for r in reports)
    assert all(r["warnings"] == [] for r in reports)
    # Both tasks derive the same port from the job id without talking: 15000 + its last four digits.
    ports = {r["main_port"] for r in reports}
    assert len(ports) == 1 and 15000 <= ports.pop() <= 24999
    assert job_id == str(reports[1]["main_port"])
    assert all(r["after_teardown"] == {"MASTER_ADDR": None, "MASTER_PORT": None} for r in reports)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_srun_port_follows_the_job_id_and_master_port_wins(slurm_cluster: SlurmCluster) -> None:
    script = (
        "import os, core_slurm; print(os.environ['SLURM_JOB_ID'], core_slurm.main_port())"
    )
    job_id, port = slurm_cluster.srun(["--ntasks=1", sys.executable, "-c", script]).stdout.split()
    assert int(port) == 15000 + int(job_id[-4:])
    pinned = slurm_cluster.srun(["--ntasks=1", sys.executable, "-c", script], env={"MASTER_PORT": "23456"})
    assert pinned.stdout.split()[1] == "23456"


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_srun_with_a_mismatched_device_count_names_both_numbers(slurm_cluster: SlurmCluster) -> None:
    command = ["--ntasks-per-node=2", "--job-name=probe", sys.executable, "-c", VALIDATE]
    lines = slurm_cluster.srun([*command, "3", "1"]).stdout.splitlines()
    assert sorted(lines) == ["detected", "detected"] + [
        "error: devices=3 per node was requested, but SLURM runs 2 tasks per node (--ntasks-per-node=2). "
        "Make them agree: devices=2, or --ntasks-per-node=3."
    ] * 2
    assert sorted(slurm_cluster.srun([*command, "2", "1"]).stdout.split()) == ["detected"] * 2 + ["valid"] * 2


@pytest.mark.timeout(120)
def test_an_interactive_job_name_is_not_treated_as_a_batch_job(slurm_cluster: SlurmCluster) -> None:
    # `srun --job-name=interactive` (or `salloc` then `bash`) is how users say "I start processes myself".
    result = slurm_cluster.srun(["--ntasks=1", "--job-name=interactive", sys.executable, "-c", DETECT])
    assert result.stdout.splitlines() == ["local"]


@pytest.mark.timeout(120)
def test_plugins_check_says_slurm_under_srun(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.srun(["--ntasks=1", "--job-name=check", sys.executable, "-m", "core.plugins", "--check"])
    assert "environment detected here:     slurm (core-slurm)" in result.stdout, result.stdout


@pytest.mark.timeout(120)
def test_a_batch_script_without_srun_warns_and_refuses_several_tasks(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    output = tmp_path / "batch.out"
    script = tmp_path / "batch.sh"
    (tmp_path / "validate.py").write_text(VALIDATE)
    script.write_text(f"#!/bin/bash\n{sys.executable} {tmp_path / 'validate.py'} 2 1\n")
    slurm_cluster.wait_for_end(
        slurm_cluster.sbatch(["--ntasks=2", "--ntasks-per-node=2", f"--output={output}", str(script)])
    )
    text = output.read_text()
    # Detected (the batch shell has SLURM_NTASKS), warned, and refused instead of waiting for a second task.
    assert "detected\n" in text and "CoreWarning" in text and "prepend it, as in `srun python script.py`" in text
    assert "error: SLURM allocated SLURM_NTASKS=2 tasks, but this process was not started by srun" in text


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_mpirun_inside_a_batch_job_is_left_to_the_mpi_environment(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # Open MPI's ranks inherit the batch step's SLURM_PROCID=0; their own ranks are OMPI_COMM_WORLD_*.
    output = tmp_path / "mpirun.out"
    script = tmp_path / "mpirun.sh"
    script.write_text(
        "#!/bin/bash\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
        f"mpirun -n 2 {sys.executable} {tmp_path / 'detect.py'}\n"
    )
    (tmp_path / "detect.py").write_text(DETECT)
    job_id = slurm_cluster.sbatch(["--ntasks=2", "--ntasks-per-node=2", f"--output={output}", str(script)])
    job = slurm_cluster.wait_for_end(job_id)
    assert job["JobState"] == "COMPLETED", output.read_text()
    # Both ranks are mpi's, and get no "prepend srun" advice: mpirun started them.
    assert output.read_text().splitlines() == ["mpi", "mpi"]


def test_the_daemons_listen_on_loopback_only(slurm_cluster: SlurmCluster) -> None:
    import psutil

    listening = {
        (name, connection.laddr.ip)
        for name, pid in slurm_cluster.daemon_pids.items()
        for connection in psutil.Process(pid).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    }
    names = {name for name, _ in listening}
    assert {"slurmctld", "slurmd"} <= names, listening
    assert {address for _, address in listening} == {"127.0.0.1"}, listening
