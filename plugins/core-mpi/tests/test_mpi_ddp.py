"""End to end: a 2-rank mpirun job trains with strategy="ddp" over gloo; mpi is detected, not named."""

from __future__ import annotations

import sys

import pytest
from mpirunner import PROBE, mpirun

TRAIN = PROBE.with_name("ddp_train_probe.py")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mpirun_two_ranks_train_with_ddp_and_agree() -> None:
    result = mpirun(2, [sys.executable, str(TRAIN), "2", "1"], timeout=200)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = sorted(result.reports(), key=lambda report: report["global_rank"])
    assert [(r["environment"], r["global_rank"], r["local_rank"], r["world_size"]) for r in reports] == [
        ("mpi", 0, 0, 2), ("mpi", 1, 1, 2),
    ]
    assert {r["batches"] for r in reports} == {4}
    assert all(r["last_loss"] < r["first_loss"] / 10 for r in reports)
    assert reports[0]["digest"] == reports[1]["digest"]
