"""SLURM preempts ``srun python -m core.run``: every rank saves, the job is requeued and resumes bitwise.

``scancel --signal=TERM <job>`` signals every process of the job's steps, as SLURM does at preemption and at
the time limit: the launcher and both of its ranks. The ranks agree on a step and save it, the launcher exits
75, and the batch script requeues the job on that status (docs/fault-tolerance.md); the requeued job runs the
same command, which resumes. Its final weights are compared with an uninterrupted run's, bit for bit.

The time-limit path is the same with no ``scancel``: ``sbatch --signal=USR1@55`` asks SLURM itself to send
``SIGUSR1`` to every process of the job's steps 55 s before the time limit. SLURM checks limits periodically (every
30 s or so), so the warning can land at any moment of that window: once while the ranks were still importing torch,
before any handler could exist, and a process without a handler dies of SIGUSR1 (CI met it). So the job starts with
a 10-minute limit, and once it is training the test lowers it to one minute (``scontrol update TimeLimit=1``): the
warning is then due, and SLURM sends it at its next check, well before the limit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from slurm_cluster import SlurmCluster, wait_until

TRAIN = Path(__file__).resolve().parents[3] / "tests" / "checkpoint_jobs" / "preemptible_train.py"
CORE_RUN = f"{sys.executable} -m core.run --accelerator cpu --strategy ddp --devices 2"

# What a user's batch script does: run the job, and requeue it when it stopped on a preemption notice (75).
# The first run paces its steps so that the signal lands mid-run; the requeued one (SLURM_RESTART_COUNT=1) does not.
BATCH = """\
#!/bin/bash
pace={pace}; [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ] && pace=0
srun {core_run} {train} {out} --pace $pace
status=$?
[ $status -eq 75 ] && scontrol requeue "$SLURM_JOB_ID"
exit $status
"""


def last_step(out: Path) -> int:
    path = out / "steps.txt"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    complete = [line for line in lines if line.endswith("\n")]
    return int(complete[-1].split()[1]) if complete else 0


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scancel_signal_term_to_srun_core_run_saves_requeues_and_resumes_bitwise(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "preempted"
    script = tmp_path / "job.sh"
    script.write_text(BATCH.format(pace=0.1, core_run=CORE_RUN, train=TRAIN, out=out))
    # The uninterrupted run, outside SLURM, alongside the first run (which mostly sleeps between its steps).
    baseline_env = {name: value for name, value in slurm_cluster.env.items() if name != "SLURM_CONF"}
    uninterrupted = subprocess.Popen([*CORE_RUN.split(), str(TRAIN), str(tmp_path / "uninterrupted")],
                                     stderr=subprocess.PIPE, text=True, env=baseline_env)
    job_id = slurm_cluster.sbatch(["--requeue", "--nodes=1", "--ntasks=1", "--job-name=core-run-preempt",
                                   f"--output={tmp_path}/job-%j.out", "--open-mode=append", str(script)])
    try:
        wait_until(lambda: last_step(out) > 12, 90, f"job {job_id} to train past step 12")
        slurm_cluster.run(["scancel", "--signal=TERM", job_id], timeout=10)
        wait_until(lambda: int(slurm_cluster.job(job_id).get("Restarts", "0")) >= 1, 60,
                   f"job {job_id} to be requeued after exiting 75")
        wait_until(lambda: slurm_cluster.job(job_id).get("JobState") == "PENDING", 30, f"job {job_id} to pend")
        # As in test_slurm_requeue.py: the node idle again, and slurmd's whole-second credential revocation past.
        wait_until(slurm_cluster.node_idle, 30, "the node to be idle after the requeue")
        time.sleep(2.0)
        slurm_cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=10)
        job = slurm_cluster.wait_for_end(job_id, timeout=90)
        logs = "\n".join(path.read_text() for path in tmp_path.glob("job-*.out"))
        assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (job, logs, slurm_cluster.logs())
        assert uninterrupted.wait(timeout=60) == 0, uninterrupted.communicate()[1]
    finally:
        slurm_cluster.run(["scancel", job_id], check=False, timeout=10)
        uninterrupted.kill()

    # SLURM signalled the launcher and both ranks; the launcher passed it on too: each rank counted one notice.
    assert "core.run: received SIGTERM, a preemption notice; passed it on to global rank(s) [0, 1]" in logs
    # Which ranks had heard it when they compared notes depends on timing: SLURM's signal and the launcher's.
    assert re.search(r"core: preempted by SIGTERM \(received by global rank\(s\) \[[01, ]+\]\): every rank stopped "
                     r"after step \d+ and saved a resumable checkpoint", logs), logs
    assert "core.run: the job stopped on a preemption notice after saving" in logs
    assert "Traceback" not in logs and "killed" not in logs
    resumed_at = (out / "resumed.txt").read_text().split()
    assert resumed_at[0] == "0" and int(resumed_at[1]) > 12 and len(resumed_at) == 2, resumed_at
    final = torch.load(out / "final.pt", weights_only=True)
    expected = torch.load(tmp_path / "uninterrupted" / "final.pt", weights_only=True)
    assert final.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), f"{name} differs after the preemption and the requeue"
    assert os.environ.get("SLURM_CONF") != slurm_cluster.env["SLURM_CONF"]  # nothing leaked into this process


def run_uninterrupted(slurm_cluster: SlurmCluster, out: Path) -> subprocess.Popen[str]:
    """The same training outside SLURM, to compare the preempted job's final weights with."""
    environment = {name: value for name, value in slurm_cluster.env.items() if name != "SLURM_CONF"}
    return subprocess.Popen([*CORE_RUN.split(), str(TRAIN), str(out)], stderr=subprocess.PIPE, text=True,
                            env=environment)


def start_requeued(slurm_cluster: SlurmCluster, job_id: str, *updates: str) -> None:
    """Start a requeued job now: its node idle again and slurmd's whole-second credential revocation past."""
    wait_until(lambda: slurm_cluster.job(job_id).get("JobState") == "PENDING", 30, f"job {job_id} to pend")
    wait_until(slurm_cluster.node_idle, 30, "the node to be idle after the requeue")
    time.sleep(2.0)
    slurm_cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now", *updates], timeout=10)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_time_limit_warning_signal_to_srun_core_run_saves_requeues_and_resumes_bitwise(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "timed"
    script = tmp_path / "job.sh"
    # Paced at 2 s a step, the first run would need 90 s: longer than SLURM takes to send the warning.
    script.write_text(BATCH.format(pace=2.0, core_run=CORE_RUN, train=TRAIN, out=out))
    uninterrupted = run_uninterrupted(slurm_cluster, tmp_path / "uninterrupted")
    job_id = slurm_cluster.sbatch(["--requeue", "--nodes=1", "--ntasks=1", "--job-name=core-run-time-limit",
                                   "--time=10", "--signal=USR1@55", f"--output={tmp_path}/job-%j.out",
                                   "--open-mode=append", str(script)])
    try:
        wait_until(lambda: last_step(out) >= 3, 90, f"job {job_id} to train past step 3")
        slurm_cluster.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=1"], timeout=10)
        # Nobody signals the job: SLURM's time-limit warning stops the first run, which requeues itself.
        wait_until(lambda: int(slurm_cluster.job(job_id).get("Restarts", "0")) >= 1, 120,
                   f"job {job_id} to be requeued after SLURM's time-limit warning")
        stopped_after = last_step(out)
        # The requeued job would get the same warning after 5 s of its own minute; under a loaded machine its 36
        # remaining steps can take longer, so its limit is raised: this test is about the first run's warning.
        start_requeued(slurm_cluster, job_id, "TimeLimit=5")
        job = slurm_cluster.wait_for_end(job_id, timeout=90)
        logs = "\n".join(path.read_text() for path in tmp_path.glob("job-*.out"))
        assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (job, logs, slurm_cluster.logs())
        assert uninterrupted.wait(timeout=60) == 0, uninterrupted.communicate()[1]
    finally:
        slurm_cluster.run(["scancel", job_id], check=False, timeout=10)
        uninterrupted.kill()

    assert 0 < stopped_after < 45, stopped_after  # stopped mid-run, by the warning (the paced run needs 45 steps)
    assert "core.run: received SIGUSR1, a preemption notice; passed it on to global rank(s) [0, 1]" in logs, logs
    assert re.search(r"core: preempted by SIGUSR1 \(received by global rank\(s\) \[[01, ]+\]\): every rank stopped "
                     r"after step \d+ and saved a resumable checkpoint", logs), logs
    assert "Traceback" not in logs and "killed" not in logs and "DUE TO TIME LIMIT" not in logs
    resumed_at = (out / "resumed.txt").read_text().split()
    assert resumed_at[0] == "0" and 0 < int(resumed_at[1]) <= stopped_after + 1 and len(resumed_at) == 2, resumed_at
    final = torch.load(out / "final.pt", weights_only=True)
    expected = torch.load(tmp_path / "uninterrupted" / "final.pt", weights_only=True)
    assert final.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), f"{name} differs after the time-limit warning and the requeue"
