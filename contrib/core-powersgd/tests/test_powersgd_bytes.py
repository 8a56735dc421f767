"""On 2 real processes: how many bytes PowerSGD passes to all-reduce per step, and that training still works.

scripts/powersgd_bytes.py trains a model with two 1024 x 1024 linear layers under ``strategy="ddp"`` with
``plugins=[PowerSGDExtension(rank=1, warmup=2)]`` and counts the bytes of every ``torch.distributed.all_reduce``
call per step, against the same model with the plain all-reduce, fp16 alone, and PowerSGD with fp16.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

SCRIPTS = Path(__file__).parent / "scripts"
FLOAT32 = 4
WARMUP = 2
STEPS = 6
# (rows, columns) of each parameter of the script's model, in order.
SHAPES = [(1024, 1024), (1024,), (1024, 1024), (1024,), (8, 1024), (8,)]


def run_script(name: str, *arguments: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    launcher = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    environment = {key: value for key, value in os.environ.items() if key not in launcher}
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *arguments],
        capture_output=True, text=True, timeout=timeout, env=environment, cwd=cwd,
    )


def powersgd_bytes(rank: int = 1, min_compression_rate: float = 2.0) -> int:
    """What PowerSGD sends for SHAPES: each matrix it shrinks enough as (n + m) x rank, the rest as is."""
    total = 0
    for shape in SHAPES:
        if len(shape) == 2:
            rows, columns = shape
            if rows * columns / ((rows + columns) * rank) >= min_compression_rate:
                total += (rows + columns) * rank * FLOAT32
                continue
        total += math.prod(shape) * FLOAT32
    return total


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, list[int]]]:
    out = tmp_path_factory.mktemp("powersgd-bytes")
    result = run_script("powersgd_bytes.py", str(out), cwd=out, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {rank: json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)}


@pytest.mark.timeout(360)
def test_powersgd_passes_at_least_4x_fewer_bytes_to_all_reduce(reports: dict[int, dict[str, list[int]]]) -> None:
    plain_bytes = sum(math.prod(shape) for shape in SHAPES) * FLOAT32
    for rank, report in reports.items():
        assert report["world_size"] == 2
        assert report["plain"] == [plain_bytes] * STEPS, f"rank {rank}"
        compressed = report["powersgd"][WARMUP:]
        assert report["powersgd"][:WARMUP] == [plain_bytes] * WARMUP, f"rank {rank}: warm-up must be plain"
        assert compressed == [powersgd_bytes()] * (STEPS - WARMUP), f"rank {rank}"
        ratio = plain_bytes / compressed[-1]
        assert ratio >= 4, f"rank {rank}: only {ratio:.1f}x fewer bytes"
        print(f"rank {rank}: {plain_bytes} -> {compressed[-1]} bytes per step after warm-up ({ratio:.0f}x fewer)")


@pytest.mark.timeout(360)
def test_the_extension_registered_its_hook_through_the_strategy(reports: dict[int, dict[str, list[int]]]) -> None:
    for report in reports.values():
        assert report["states"] == ["PowerSGDState"]
        assert report["iterations"] == [STEPS]  # PowerSGD counted every step of the Lite-set-up model
        assert all(math.isfinite(loss) for loss in report["powersgd_losses"])


@pytest.mark.timeout(360)
def test_fp16_halves_the_bytes_alone_and_on_top_of_powersgd(reports: dict[int, dict[str, list[int]]]) -> None:
    for report in reports.values():
        assert [2 * sent for sent in report["fp16"]] == report["plain"]
        assert [2 * sent for sent in report["powersgd_fp16"][WARMUP:]] == report["powersgd"][WARMUP:]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_digits_example_still_reaches_its_accuracy_bar(tmp_path: Path) -> None:
    result = run_script(
        "digits_powersgd.py", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", "--rank", "1",
        cwd=tmp_path, timeout=400,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "extension      powersgd" in result.stdout
    accuracy = float(re.findall(r"^test accuracy: (\d\.\d{4})$", result.stdout, flags=re.MULTILINE)[-1])
    assert accuracy >= 0.95
