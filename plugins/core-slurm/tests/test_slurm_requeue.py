"""Auto-requeue against the real slurmctld: SIGUSR1 -> checkpoint -> rank 0 requeues -> the job resumes.

The signal is sent as SLURM sends it ahead of a time limit (``#SBATCH --signal=USR1@90``), by
``scancel --signal=USR1 <job>``, which reaches every task of the job's steps. SLURM holds a requeued job
for 120 s before it may start again; the test, as the cluster's admin, lets it start at once
(``scontrol update JobId=... StartTime=now``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, wait_until

PROBE = Path(__file__).with_name("requeue_probe.py")


def run_requeue_cycle(cluster: SlurmCluster, directory: Path, mode: str) -> dict[str, float]:
    """Submit the probe job, signal it once ready, let the requeued job run again; return the latencies."""
    script = directory / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun {sys.executable} {PROBE} {directory} {mode}\n")
    job_id = cluster.sbatch(
        ["--requeue", "--nodes=1", "--ntasks-per-node=2", f"--job-name=requeue-{mode}",
         f"--output={directory}/job-%j.out", "--open-mode=append", str(script)]
    )
    try:
        wait_until(lambda: all((directory / f"ready-{rank}").exists() for rank in (0, 1)), 90,
                   f"both tasks of job {job_id} to be ready")
        signalled = time.monotonic()
        cluster.run(["scancel", "--signal=USR1", job_id], timeout=10)
        wait_until(lambda: int(cluster.job(job_id).get("Restarts", "0")) >= 1, 60, f"job {job_id} to requeue")
        requeued = time.monotonic() - signalled
        wait_until(lambda: cluster.job(job_id).get("JobState") == "PENDING", 30, f"job {job_id} to pend")
        # The first run's step may still be winding down (srun waits up to 4 s); a start before the node is
        # idle again makes the restarted batch script fail at once.
        wait_until(cluster.node_idle, 30, "the node to be idle after the requeue")
        # slurmd revokes the killed run's credential with a time in whole seconds and refuses a launch whose
        # credential is not newer ("Job N already killed, do not launch batch job"): under load the release
        # below could land in the same second. SLURM itself holds a requeued job for 120 s.
        time.sleep(2.0)
        cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=10)
        wait_until(lambda: cluster.job(job_id).get("JobState") in ("COMPLETED", "FAILED"), 90,
                   f"the requeued job {job_id} to run again and end")
        job = cluster.job(job_id)
        logs = "\n".join(path.read_text() for path in directory.glob("job-*.out"))
        assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (
            {key: job.get(key) for key in ("JobState", "Reason", "ExitCode", "Restarts", "NodeList")},
            logs, cluster.logs(),
        )
        completed = time.monotonic() - signalled
        print(f"{mode}: requeued {requeued:.2f} s after the signal, ran again and completed after {completed:.2f} s")
        return {"requeued": requeued, "completed": completed}
    finally:
        cluster.run(["scancel", job_id], check=False, timeout=10)


def resumed_steps(directory: Path) -> list[int]:
    reports = [json.loads((directory / f"resumed-{rank}.json").read_text()) for rank in (0, 1)]
    assert [report["restart_count"] for report in reports] == [1, 1]
    return [report["step"] for report in reports]


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_sigusr1_checkpoints_every_task_requeues_and_the_job_resumes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    run_requeue_cycle(slurm_cluster, tmp_path, "immediate")
    saved = [json.loads((tmp_path / f"checkpoint-{rank}.json").read_text()) for rank in (0, 1)]
    assert [checkpoint["rank"] for checkpoint in saved] == [0, 1]
    assert all(checkpoint["step"] > 0 for checkpoint in saved)
    assert resumed_steps(tmp_path) == [checkpoint["step"] for checkpoint in saved]


def training_cycle(test: Callable[..., None]) -> Callable[..., None]:
    """The marks of a requeue cycle whose tasks train with torch (slower to start than the immediate probe)."""
    marked: Callable[..., None] = pytest.mark.distributed(pytest.mark.slow(pytest.mark.timeout(300)(test)))
    return marked


@training_cycle
def test_a_ddp_loop_defers_the_requeue_to_a_step_boundary_and_resumes_from_lite_save(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    run_requeue_cycle(slurm_cluster, tmp_path, "deferred")
    assert (tmp_path / "checkpoint.pt").exists()
    steps = resumed_steps(tmp_path)
    assert steps[0] == steps[1] > 0  # both ranks saved at the same agreed step and restored it


@training_cycle
def test_a_lightning_trainer_saves_an_hpc_checkpoint_requeues_and_its_fit_resumes_from_it(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # Lightning's Trainer under SLURM: on SIGUSR1, hpc_ckpt_<n>.ckpt in default_root_dir and scontrol requeue from
    # rank 0; the requeued job's fit() without ckpt_path starts from it. The program has no requeue code at all.
    import torch

    run_requeue_cycle(slurm_cluster, tmp_path, "trainer")
    saved = tmp_path / "root" / "hpc_ckpt_1.ckpt"
    assert sorted(path.name for path in (tmp_path / "root").glob("hpc_ckpt_*")) == ["hpc_ckpt_1.ckpt"]
    step = torch.load(saved, weights_only=True)["global_step"]
    assert step >= 3 and resumed_steps(tmp_path) == [step, step]  # both ranks stopped at one agreed step
    logs = "\n".join(path.read_text() for path in tmp_path.glob("job-*.out"))
    assert "the job was requeued at the scheduler's notice" in logs and "exit status 75" in logs
