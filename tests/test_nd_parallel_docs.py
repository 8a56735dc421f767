"""The N-D parallelism examples of docs/strategies.md run as written, on 2 real processes over gloo.

Each example is a ```python block whose first line names the script (``# tensor_parallel_lite.py: ...``); the test
writes it to a file, runs ``python <file>`` (the script starts its second process itself, as the docs say), and
checks what it prints: the mesh, which layers each rank holds, a falling loss.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "strategies.md"


def example(name: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.DOTALL):
        if block.startswith(f"# {name}:"):
            return str(block)
    raise AssertionError(f"docs/strategies.md has no example starting with '# {name}:'")


def run(name: str, cwd: Path) -> list[str]:
    script = cwd / name
    script.write_text(example(name))
    environment = {key: value for key, value in os.environ.items() if key not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    finished = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=240,
                              env={**environment, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-4000:]
    return finished.stdout.splitlines()


def falling_losses(lines: list[str]) -> list[float]:
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == [
        "step 0", "step 10", "step 20", "step 30", "step 39"]  # printed once: by rank 0
    assert losses[-1] < losses[0] / 4, losses
    return losses


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_tensor_parallel_example_trains_and_writes_a_sharded_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("core_model_parallel", reason="the example uses plugins/core-model-parallel")
    pytest.importorskip("core_dcp", reason="its checkpoint is sharded through plugins/core-dcp")
    lines = run("tensor_parallel_lite.py", tmp_path)
    assert any(line.startswith("DeviceMesh((data_parallel=1, tensor_parallel=2)") for line in lines), lines
    falling_losses(lines)
    assert (tmp_path / "tensor_parallel.ckpt").is_dir()


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_pipeline_example_trains_with_each_rank_holding_its_stage(tmp_path: Path) -> None:
    pytest.importorskip("core_pipeline", reason="the example uses plugins/core-pipeline")
    lines = run("pipeline_lite.py", tmp_path)
    # lite.print prints on rank 0 only: rank 0 holds layers 0 and 1, not the head (stage 1's).
    assert "rank 0 holds ['layers.0', 'layers.1']" in lines, lines
    falling_losses(lines)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_pipeline_trainer_example_trains_and_checkpoints_the_whole_module(tmp_path: Path) -> None:
    pytest.importorskip("core_pipeline", reason="the example uses plugins/core-pipeline")
    lines = run("pipeline_trainer.py", tmp_path)
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 0", "epoch 10", "epoch 20", "epoch 30", "epoch 39"]
    losses = [float(line.rsplit(" ", 1)[1]) for line in epochs]
    assert losses[-1] < losses[0] / 4, losses
    assert "checkpoint holds ['head', 'layers']" in lines, lines  # rank 0 held no head, its checkpoint does
