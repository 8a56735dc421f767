"""examples/digits_trainer.py run as a user runs it: the Trainer version of the digits job reaches 95% test
accuracy, prints one line per epoch and the resolved active set, and runs on two ddp processes too."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "digits_trainer.py"


def run_example(root: Path, *flags: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE")}
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *flags], capture_output=True, text=True,
                          timeout=timeout, env=environment)


def final_accuracy(output: str) -> float:
    found = re.findall(r"^test accuracy: (\d\.\d{4})$", output, flags=re.MULTILINE)
    assert len(found) == 1, output  # printed once, by global rank 0
    return float(found[0])


@pytest.mark.slow
@pytest.mark.timeout(450)
def test_the_trainer_digits_job_reaches_95_percent(tmp_path: Path) -> None:
    result = run_example(tmp_path, "--accelerator", "cpu", "--max-epochs", "10")

    assert result.returncode == 0, result.stdout + result.stderr
    assert final_accuracy(result.stdout) >= 0.95
    assert re.search(r"strategy\s+single_device", result.stdout)
    assert len(re.findall(r"^epoch \d+/10 .*val_acc=", result.stdout, flags=re.MULTILINE)) == 10
    assert (tmp_path / "logs" / "version_0" / "metrics.csv").exists()
    assert len(list((tmp_path / "checkpoints").glob("*.ckpt"))) == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_trainer_digits_job_fails_below_the_minimum_accuracy(tmp_path: Path) -> None:
    result = run_example(tmp_path, "--accelerator", "cpu", "--max-epochs", "1", "--min-accuracy", "0.999")
    assert result.returncode == 1
    assert "is below --min-accuracy 0.999" in result.stderr


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(450)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_the_trainer_digits_job_runs_on_two_ddp_processes(tmp_path: Path) -> None:
    result = run_example(tmp_path, "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", "--max-epochs", "3",
                         "--min-accuracy", "0.8")

    assert result.returncode == 0, result.stdout + result.stderr
    assert final_accuracy(result.stdout) >= 0.8
    assert re.search(r"devices\s+\[0, 1\] x 1 node\(s\) = world size 2", result.stdout)
    assert len(re.findall(r"^epoch \d+/3 ", result.stdout, flags=re.MULTILINE)) == 3, "one line per epoch, rank 0 only"
