"""``ddp_sharded`` on 2 real gloo processes: it trains like ``ddp``, keeps half the optimizer state per rank, agrees
on skipped steps under ``16-mixed``, and its checkpoints resume on 1 process.

Three jobs, started once for the module: scripts/sharded_lite.py (Lite, 2 ranks, next to torch's own
DistributedDataParallel in the same processes), scripts/sharded_trainer.py (Trainer, 2 ranks, ``16-mixed``), then
scripts/sharded_resume.py (1 process) reading what both saved.

Not covered here: CUDA. On the CPU the loss scaler is torch's ``GradScaler("cpu")`` of the ``16-mixed`` precision
(FairScale's ``ShardedGradScaler`` disables itself without CUDA, and the scaler belongs to the precision plugin
anyway); what makes it shard-aware, every rank skipping a step when any rank's gradients overflow, is the
strategy's and is what the Trainer job checks. nccl and reduce buckets across nodes are not exercised.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.distributed]

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import sharded_trainer  # noqa: E402

_LAUNCHER_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def run_script(name: str, out: Path, timeout: float) -> None:
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCHER_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    environment["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS), environment.get("PYTHONPATH", "")])
    finished = subprocess.run([sys.executable, str(SCRIPTS / name), str(out)], capture_output=True, text=True,
                              timeout=timeout, env=environment, cwd=out)
    assert finished.returncode == 0, f"{name} failed:\n{finished.stdout[-3000:]}\n{finished.stderr[-5000:]}"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fairscale")
    run_script("sharded_lite.py", out, timeout=150)
    run_script("sharded_trainer.py", out, timeout=150)
    run_script("sharded_resume.py", out, timeout=120)

    def read(name: str) -> Any:
        return json.loads((out / name).read_text())

    return {
        "lite": [read(f"rank-{rank}.json") for rank in (0, 1)],
        "trainer": [read(f"trainer-rank-{rank}.json") for rank in (0, 1)],
        "resumed": read("resumed.json"),
        "out": out,
    }


@pytest.mark.timeout(480)
def test_the_loss_curve_is_ddps_within_float_tolerance(reports: dict[str, Any]) -> None:
    for rank, report in enumerate(reports["lite"]):
        assert report["world_size"] == 2 and report["optimizer_type"] == "ShardedOptimizer"
        sharded, ddp = report["sharded_losses"], report["ddp_losses"]
        assert len(sharded) == len(ddp) == 8
        assert sharded[-1] < sharded[0], f"rank {rank} did not learn: {sharded}"
        for step, (mine, theirs) in enumerate(zip(sharded, ddp, strict=True)):
            assert math.isclose(mine, theirs, rel_tol=1e-5, abs_tol=1e-7), (
                f"rank {rank}, step {step}: ddp_sharded's loss {mine} differs from ddp's {theirs}"
            )


@pytest.mark.timeout(480)
def test_each_rank_keeps_about_half_of_ddps_optimizer_state(reports: dict[str, Any]) -> None:
    total = sum(report["sharded_state_bytes"] for report in reports["lite"])
    for rank, report in enumerate(reports["lite"]):
        ratio = report["sharded_state_bytes"] / report["ddp_state_bytes"]
        print(f"rank {rank}: Adam state {report['sharded_state_bytes']} bytes under ddp_sharded, "
              f"{report['ddp_state_bytes']} under ddp ({ratio:.3f})")
        assert 0.45 <= ratio <= 0.55, f"rank {rank} keeps {ratio:.3f} of ddp's optimizer state"
    # The two shards together are the whole state: nothing is kept twice, nothing is missing.
    ddp_bytes = reports["lite"][0]["ddp_state_bytes"]
    assert abs(total - ddp_bytes) <= 2 * 8, (total, ddp_bytes)  # the scalar 'step' tensor is kept per parameter
    owned = [report["owned_elements"] for report in reports["lite"]]
    assert sum(owned) == reports["lite"][0]["total_elements"]


@pytest.mark.timeout(480)
def test_the_checkpoint_of_2_ranks_resumes_on_1_process(reports: dict[str, Any]) -> None:
    expected = reports["lite"][0]["resumed_losses"]
    for how in ("ddp_sharded", "single_device"):  # an OSS of world size 1, and a plain torch Adam
        actual = reports["resumed"][how]
        assert len(actual) == len(expected)
        for step, (mine, theirs) in enumerate(zip(actual, expected, strict=True)):
            assert math.isclose(mine, theirs, rel_tol=1e-5, abs_tol=1e-7), (
                f"resumed under {how}, step {step}: loss {mine}, the 2-rank run went on with {theirs}"
            )


@pytest.mark.timeout(480)
def test_the_trainer_trains_and_every_rank_skips_the_step_one_rank_overflowed(reports: dict[str, Any]) -> None:
    first, second = reports["trainer"]
    assert first["global_step"] == second["global_step"] == sharded_trainer.STEPS
    assert sharded_trainer.OVERFLOW_STEP in first["unchanged_steps"], first["unchanged_steps"]
    assert first["unchanged_steps"] == second["unchanged_steps"]
    assert len(first["unchanged_steps"]) < sharded_trainer.STEPS, "no step was taken"
    assert first["parameters"] == second["parameters"], "the ranks' weights drifted apart"
    # Saved after fit: the whole Adam state (one entry per parameter), consolidated from both ranks.
    assert first["optimizer_state_entries"] == 4


@pytest.mark.timeout(480)
def test_the_trainer_checkpoint_resumes_on_1_process(reports: dict[str, Any]) -> None:
    resumed = reports["resumed"]["trainer"]
    assert resumed["global_step"] == sharded_trainer.STEPS + sharded_trainer.RESUMED_STEPS
    assert len(resumed["losses"]) == sharded_trainer.RESUMED_STEPS
    assert all(math.isfinite(loss) for loss in resumed["losses"])
