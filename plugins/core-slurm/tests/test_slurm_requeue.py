"""Auto-requeue against the real slurmctld: SIGUSR1 -> every task checkpoints -> rank 0 requeues -> resume.

The signal is sent as SLURM sends it ahead of a time limit (``#SBATCH --signal=USR1@90``), by
``scancel --signal=USR1 <job>``, which reaches every task of the job's steps.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, wait_until

PROBE = Path(__file__).with_name("requeue_probe.py")


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_sigusr1_checkpoints_requeues_and_the_job_resumes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun {sys.executable} {PROBE} {tmp_path}\n")
    job_id = slurm_cluster.sbatch(
        ["--requeue", "--nodes=1", "--ntasks-per-node=2", "--job-name=requeue", f"--output={tmp_path}/job-%j.out",
         str(script)]
    )
    try:
        wait_until(lambda: all((tmp_path / f"ready-{rank}").exists() for rank in (0, 1)), 60,
                   f"both tasks of job {job_id} to be ready:\n{slurm_cluster.job(job_id)}")
        signalled = time.monotonic()
        slurm_cluster.run(["scancel", "--signal=USR1", job_id], timeout=10)

        wait_until(lambda: int(slurm_cluster.job(job_id).get("Restarts", "0")) >= 1, 60, f"job {job_id} to requeue")
        requeue_latency = time.monotonic() - signalled
        checkpoints = [json.loads((tmp_path / f"checkpoint-{rank}.json").read_text()) for rank in (0, 1)]
        assert [c["rank"] for c in checkpoints] == [0, 1]
        assert all(c["step"] > 0 for c in checkpoints)

        # SLURM holds a requeued job for 120 s (BeginTime); as the cluster's admin, let it start at once.
        wait_until(lambda: slurm_cluster.job(job_id).get("JobState") == "PENDING", 30, f"job {job_id} to pend")
        slurm_cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=10)
        wait_until(lambda: slurm_cluster.job(job_id).get("JobState") == "COMPLETED", 60,
                   f"the requeued job {job_id} to run again and complete")
        resume_latency = time.monotonic() - signalled
        resumed = [json.loads((tmp_path / f"resumed-{rank}.json").read_text()) for rank in (0, 1)]
        assert [r["step"] for r in resumed] == [c["step"] for c in checkpoints]
        assert [r["restart_count"] for r in resumed] == [1, 1]
        job = slurm_cluster.job(job_id)
        assert job["Restarts"] == "1" and job["ExitCode"] == "0:0", job
        print(f"requeue latency {requeue_latency:.2f} s, resumed and completed after {resume_latency:.2f} s")
    finally:
        slurm_cluster.run(["scancel", job_id], check=False, timeout=10)
