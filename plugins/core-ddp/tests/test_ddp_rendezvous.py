"""The launcher serves the job's store before any rank starts; ranks check they joined their own job."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from core_ddp import JOB_VARIABLE

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(600)]


def reports(out: Path) -> list[dict[str, object]]:
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_a_job_meets_at_its_launchers_store_with_its_own_job_id(jobs: Any, tmp_path: Path, strategy: str) -> None:
    out = tmp_path / strategy
    out.mkdir()
    finished = jobs.run(jobs.script("rendezvous_job.py", str(out), strategy), timeout=240)
    assert finished.returncode == 0, finished.output
    first, second = reports(out)
    assert first["sum"] == second["sum"] == 3.0
    assert first["job"] and first["job"] == second["job"]  # both ranks carry the launcher's job id
    assert first["port"] == second["port"]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_a_launch_removes_the_scratch_directories_of_killed_launchers_and_its_own(
    jobs: Any, tmp_path: Path, strategy: str
) -> None:
    """A rank 0 that was SIGKILLed leaves its error-file directory behind: the next launch removes it (its process
    is gone), keeps one whose process still runs, and removes its own at the end."""
    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    out.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (temporary / f"core-ddp-{gone}-abandoned" / "rank-1.json").parent.mkdir()
    (temporary / f"core-ddp-{gone}-abandoned" / "rank-1.json").write_text("{}")
    (temporary / f"core-ddp-{os.getpid()}-running").mkdir()  # this pytest process still runs
    (temporary / "core-ddp-unnamed").mkdir()  # not named after a process: not ours to judge
    finished = jobs.run(jobs.script("rendezvous_job.py", str(out), strategy), timeout=240,
                        extra_env={"TMPDIR": str(temporary)})
    assert finished.returncode == 0, finished.output
    assert sorted(path.name for path in temporary.iterdir()) == [f"core-ddp-{os.getpid()}-running", "core-ddp-unnamed"]


def test_eight_jobs_at_once_all_meet_their_own_ranks(jobs: Any, tmp_path: Path) -> None:
    started = []
    for index in range(8):
        out = tmp_path / f"job-{index}"
        out.mkdir()
        started.append((out, jobs.start(jobs.script("rendezvous_job.py", str(out)))))
    ports, job_ids = set(), set()
    for out, running in started:
        finished = running.finish(timeout=400)
        assert finished.returncode == 0, finished.output
        first, second = reports(out)
        assert first["sum"] == second["sum"] == 3.0
        ports.add(first["port"])
        job_ids.add(first["job"])
    assert len(job_ids) == 8 and len(ports) == 8


def test_a_proposed_port_taken_before_launch_is_replaced_not_shared(jobs: Any, tmp_path: Path) -> None:
    """MASTER_PORT names a port another program listens on: the launcher binds another one for its store."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        out = tmp_path / "out"
        out.mkdir()
        finished = jobs.run(jobs.script("rendezvous_job.py", str(out)), timeout=240,
                            extra_env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(taken)})
    assert finished.returncode == 0, finished.output
    assert {report["port"] for report in reports(out)} != {str(taken)}


def _rank_of_a_job(jobs: Any, tmp_path: Path, port: int, job: str) -> str:
    """Start what looks like rank 1 of job ``job`` whose launcher is at ``port``; return its stderr."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    environment = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_RANK": "1", "RANK": "1",
                   "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0", JOB_VARIABLE: job}
    started = time.monotonic()
    finished = jobs.run(jobs.script("rendezvous_job.py", str(out)), timeout=120, extra_env=environment)
    assert finished.returncode != 0
    assert time.monotonic() - started < 60  # at once, not after a collective's timeout
    return finished.stderr


def test_a_rank_sent_to_another_jobs_store_fails_at_once_naming_both_jobs(jobs: Any, tmp_path: Path) -> None:
    other = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    other.set("core-ddp/job", "the-other-job")
    this_job = f"this-job-{os.getpid()}"  # the job id names its launcher: this test process, the rank's parent
    stderr = _rank_of_a_job(jobs, tmp_path, other.port, this_job)
    assert f"RendezvousError: core-ddp: global rank 1 of job {this_job} reached the store of another job " in stderr
    assert f"(the-other-job) at 127.0.0.1:{other.port}, not its launcher's" in stderr
    assert "DistNetworkError" not in stderr


def test_a_rank_sent_to_a_store_of_another_program_says_so(jobs: Any, tmp_path: Path) -> None:
    foreign = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    stderr = _rank_of_a_job(jobs, tmp_path, foreign.port, f"this-job-{os.getpid()}")
    assert f"reached a store of another program at 127.0.0.1:{foreign.port}" in stderr


def test_core_run_binds_the_port_and_hands_the_socket_to_global_rank_zero(jobs: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "core.run", "--strategy", "ddp", "--devices", "2",
               *jobs.script("rendezvous_job.py", str(out))[1:]]
    finished = jobs.run(command, timeout=240)
    assert finished.returncode == 0, finished.output
    first, second = reports(out)
    assert first["sum"] == second["sum"] == 3.0 and first["port"] == second["port"]
    assert first["inherited"] is not None and second["inherited"] is None  # only the serving rank gets it
    assert first["job"] is None  # started by a launcher: global rank 0 serves, on the handed socket


def test_a_job_id_inherited_from_an_unrelated_launcher_is_ignored(jobs: Any, tmp_path: Path) -> None:
    """A process that got CORE_DDP_JOB through something else (a test runner, then mpirun) is not that job's."""
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "core.run", "--strategy", "ddp", "--devices", "2",
               *jobs.script("rendezvous_job.py", str(out))[1:]]
    finished = jobs.run(command, timeout=240, extra_env={JOB_VARIABLE: "0123abcd-1"})  # a launcher long gone
    assert finished.returncode == 0, finished.output
    first, second = reports(out)
    assert first["sum"] == second["sum"] == 3.0
