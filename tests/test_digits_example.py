"""The README's main job, examples/digits.py, run as a user runs it: it trains to at least 95% test accuracy,
prints the resolved active set and its progress, and fails loudly when the accuracy is not reached."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import core

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "digits.py"


def run_digits(*flags: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key not in ("CORE_GLOBAL_SEED", "LOCAL_RANK")}
    # A network this small gains nothing from intra-op threads, and they fight over two shared cores.
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=timeout, env=environment
    )


def final_accuracy(output: str) -> float:
    found = re.findall(r"^test accuracy: (\d\.\d{4})$", output, flags=re.MULTILINE)
    assert len(found) == 1, output  # printed once, by rank 0 only
    return float(found[0])


@pytest.fixture
def digits(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The script imported as a module, to call its main() in this process (no interpreter start-up)."""
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    spec = importlib.util.spec_from_file_location("digits_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 does for the subprocesses
    yield module
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_digits_job_reaches_95_percent_on_the_cpu() -> None:
    result = run_digits("--accelerator", "cpu", "--epochs", "10")

    assert result.returncode == 0, result.stderr
    assert final_accuracy(result.stdout) >= 0.95
    for kind, alias in [("accelerator", "cpu"), ("strategy", "single_device"), ("precision", "32-true")]:
        assert re.search(rf"^\s+{kind}\s+{alias}\s+\(core\)$", result.stdout, flags=re.MULTILINE), result.stdout
    assert len(re.findall(r"^epoch\s+\d+/10 ", result.stdout, flags=re.MULTILINE)) == 10


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_digits_job_reaches_95_percent_in_bf16(digits: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert digits.main(["--precision", "bf16-true", "--epochs", "10"]) == 0
    output = capsys.readouterr().out
    assert final_accuracy(output) >= 0.95
    assert re.search(r"precision\s+bf16-true", output)


def test_the_digits_job_fails_below_the_minimum_accuracy(
    digits: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert digits.main(["--epochs", "1", "--min-accuracy", "0.999"]) == 1
    assert "is below --min-accuracy 0.999" in capsys.readouterr().err


def test_a_bad_flag_is_reported_by_the_resolver_with_the_fix(digits: ModuleType) -> None:
    with pytest.raises(core.UnknownPluginError) as error:
        digits.main(["--strategy", "dpp", "--epochs", "1"])
    assert "Unknown strategy 'dpp'" in str(error.value) and "Did you mean 'dp'" in str(error.value)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_the_digits_job_on_two_processes_agrees_on_one_accuracy(strategy: str) -> None:
    result = run_digits("--strategy", strategy, "--devices", "2", "--epochs", "10")

    assert result.returncode == 0, result.stderr
    assert final_accuracy(result.stdout) >= 0.95
    assert re.search(r"devices\s+\[0, 1\] x 1 node\(s\) = world size 2", result.stdout)
