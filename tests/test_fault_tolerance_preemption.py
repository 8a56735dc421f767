"""A preemption notice (SIGTERM) to any single rank: every rank saves the same step, stops, and resumes bitwise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.tensor  # fsdp runs save DTensors in final.pt
from conftest import job_environment

from core.fault_tolerance import MARKER_NAME, CheckpointDirectory
from core.toolkit import PREEMPTED_EXIT_CODE

SCRIPT = Path(__file__).parent / "checkpoint_jobs" / "resumable_train.py"

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(600)]


def local(value: torch.Tensor) -> torch.Tensor:
    """Under fsdp rank 0 saved its shards (DTensors): the plain tensor each holds."""
    return value.to_local() if isinstance(value, torch.distributed.tensor.DTensor) else value


def run(out: Path, strategy: str, *extra: str) -> subprocess.CompletedProcess[str]:
    environment = job_environment()
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--strategy", strategy, *extra],
                          capture_output=True, text=True, timeout=300, env=environment)


@pytest.mark.parametrize(
    ("strategy", "rank"),
    [
        pytest.param("ddp", 1, marks=pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None,
                                                        reason="core-ddp is not installed")),
        pytest.param("fsdp", 0, marks=pytest.mark.skipif(importlib.util.find_spec("core_fsdp") is None,
                                                         reason="core-fsdp is not installed")),
    ],
)
def test_sigterm_to_one_rank_stops_every_rank_at_one_saved_step_and_the_resumed_run_is_bitwise(
    tmp_path: Path, strategy: str, rank: int
) -> None:
    uninterrupted = run(tmp_path / "uninterrupted", strategy)
    assert uninterrupted.returncode == 0, uninterrupted.stderr

    preempted = run(tmp_path / "preempted", strategy, "--preempt-at", "23", "--preempt-rank", str(rank))
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stderr
    assert f"core: preempted by SIGTERM (received by global rank(s) [{rank}]): every rank stopped after step 24" in (
        preempted.stderr
    )
    assert "Run the same command again to resume" in preempted.stderr
    assert "Traceback" not in preempted.stderr and "failed" not in preempted.stderr
    directory = CheckpointDirectory(str(tmp_path / "preempted" / "checkpoints"))
    assert directory.newest_complete() == 24  # the agreed step: one checkpoint, complete, on every rank's word
    assert Path(directory.checkpoint_path(24)).parent.joinpath(MARKER_NAME).exists()
    assert not (tmp_path / "preempted" / "final.pt").exists()

    resumed = run(tmp_path / "preempted", strategy)  # the same command again
    assert resumed.returncode == 0, resumed.stderr
    log = (tmp_path / "preempted" / "progress-0.txt").read_text()
    assert "resumed at step 24" in log
    final = torch.load(tmp_path / "preempted" / "final.pt", weights_only=True)
    expected = torch.load(tmp_path / "uninterrupted" / "final.pt", weights_only=True)
    assert final.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(local(final[name]), local(tensor)), f"{name} differs after the resume"


TRAINER_SCRIPT = Path(__file__).parent / "checkpoint_jobs" / "trainer_preempt.py"


@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_the_trainer_stops_every_rank_at_one_saved_step_and_fit_resumes_bitwise(tmp_path: Path) -> None:
    environment = job_environment()

    def fit(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(TRAINER_SCRIPT), str(out), *extra], capture_output=True,
                              text=True, timeout=300, env=environment)

    assert fit(tmp_path / "uninterrupted").returncode == 0
    preempted = fit(tmp_path / "preempted", "--preempt-at", "13", "--preempt-rank", "1")
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stderr
    assert "preempted by SIGTERM (received by global rank(s) [1]): every rank stopped after step 13" in preempted.stderr
    assert CheckpointDirectory(str(tmp_path / "preempted" / "resumable")).newest_complete() == 13
    resumed = fit(tmp_path / "preempted")
    assert resumed.returncode == 0, resumed.stderr
    final = torch.load(tmp_path / "preempted" / "final.pt", weights_only=True)
    expected = torch.load(tmp_path / "uninterrupted" / "final.pt", weights_only=True)
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), f"{name} differs after the resume"
