"""The Trainer on two real processes (core-ddp): validation losses logged with ``sync_dist=True`` equal the
single-process loss over the whole validation set, although the sets do not split evenly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import DDP_JOBS

SCRIPTS = Path(__file__).parent / "trainer_scripts"
sys.path.insert(0, str(SCRIPTS))

import ddp_validation  # noqa: E402

pytestmark = DDP_JOBS


def run_script(strategy: str, output: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value for key, value in os.environ.items()
        if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                       "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"}
    }
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "ddp_validation.py"), strategy, str(output)],
        capture_output=True, text=True, timeout=240, env=environment,
    )


def single_process_losses(state: dict[str, torch.Tensor]) -> tuple[list[float], list[float]]:
    """Per validation set: the mean loss over every sample, and what DistributedSampler's padding would give."""
    net = ddp_validation.Net()
    net.load_state_dict(state)
    exact, padded = [], []
    with torch.no_grad():
        for loader in ddp_validation.validation_loaders():
            inputs, targets = loader.dataset.tensors  # type: ignore[attr-defined]
            losses = F.cross_entropy(net(inputs), targets, reduction="none").double()
            exact.append(float(losses.mean()))
            repeated = (-len(losses)) % 2  # DistributedSampler pads to a multiple of the world size
            padded.append(float(torch.cat([losses, losses[:repeated]]).mean()))
    return exact, padded


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What each launch style saved: one run of the script per strategy, shared by the tests below."""
    found = {}
    for strategy in ("ddp", "ddp_spawn"):
        output = tmp_path_factory.mktemp(strategy) / "result.pt"
        result = run_script(strategy, output)
        assert result.returncode == 0, result.stdout + result.stderr
        found[strategy] = torch.load(output, weights_only=True)
    return found


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_sync_dist_validation_loss_on_two_processes_equals_the_full_set_loss(
    strategy: str, results: dict[str, dict[str, Any]]
) -> None:
    saved = results[strategy]
    assert saved["world_size"] == 2
    assert saved["global_step"] == 2 * 4, "64 samples, 32 per process, batches of 8, 2 epochs"

    exact, padded = single_process_losses(saved["state"])
    for index, want in enumerate(exact):
        key = f"val_loss/dataloader_idx_{index}"
        assert saved["fit"][key] == pytest.approx(want, abs=1e-6), f"{key} logged during fit"
        assert saved["validate"][index][key] == pytest.approx(want, abs=1e-6), f"{key} from validate()"
    assert abs(padded[1] - exact[1]) > 1e-4, "with padding the odd-sized set would be biased: the test would not notice"


@pytest.mark.timeout(600)
def test_ddp_and_ddp_spawn_train_the_same_weights(results: dict[str, dict[str, Any]]) -> None:
    """Same data, same initial weights: re-run script and spawned processes must agree bit for bit (the spawned
    ranks must not share one copy of the weights, which would apply every step twice)."""
    for name, tensor in results["ddp"]["state"].items():
        assert torch.equal(tensor, results["ddp_spawn"]["state"][name]), name


@pytest.mark.timeout(300)
def test_under_ddp_spawn_the_callers_logger_points_where_rank_zero_wrote(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}}
    environment["OMP_NUM_THREADS"] = "1"
    result = subprocess.run([sys.executable, str(SCRIPTS / "spawn_logger.py"), str(tmp_path)], capture_output=True,
                            text=True, timeout=240, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    reported = json.loads(result.stdout.strip().splitlines()[-1])
    assert reported["versions"] == ["version_0", "version_1"]  # rank 0 wrote version_1, in its own process
    log_dir = Path(reported["log_dir"])
    assert log_dir == tmp_path / "logs" / "version_1"  # the version came back (else the caller would pick version_2)
    rows = (log_dir / "metrics.csv").read_text().splitlines()
    assert set(rows[0].split(",")) == {"step", "loss", "epoch"} and len(rows) == 3  # 2 optimizer steps, both logged
    assert json.loads((log_dir / "hparams.json").read_text()) == {"width": 2}
    assert reported["state"] == [True, True]  # core.lightning's Trainer: finished in the spawned processes
