"""End to end: a 2-task srun job trains with strategy="ddp" over gloo; slurm is detected, not named."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster, json_reports

TRAIN = Path(__file__).with_name("ddp_train_probe.py")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_srun_two_tasks_train_with_ddp_and_agree(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.srun(
        ["--nodes=1", "--ntasks-per-node=2", "--job-name=ddp", sys.executable, str(TRAIN), "2", "1"], timeout=200
    )
    reports: list[dict[str, Any]] = sorted(json_reports(result.stdout), key=lambda report: str(report["global_rank"]))
    assert [(r["environment"], r["global_rank"], r["local_rank"], r["world_size"]) for r in reports] == [
        ("slurm", 0, 0, 2), ("slurm", 1, 1, 2),
    ], result.stdout + result.stderr
    assert {r["batches"] for r in reports} == {4}  # 256 samples / 2 ranks / batch 32: the data was split
    assert all(r["last_loss"] < r["first_loss"] / 10 for r in reports)
    assert reports[0]["digest"] == reports[1]["digest"]  # DDP kept the replicas identical
