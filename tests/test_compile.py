"""A ``torch.compile``'d model under ``single_device``, ``ddp``, ``fsdp``, ``deepspeed_stage_2`` and
``model_parallel`` (1x2 and 2x1 meshes): it trains like the eager one, and its checkpoints hold the plain module's
keys (no ``_orig_mod.``) and load into an uncompiled model.

Lite sets up the module under the compile wrapper, lets the strategy wrap or shard it, and compiles the result
(after DDP wrapping and FSDP sharding, as torch recommends). Inductor fuses operations differently from eager
mode, so weights agree to float32 rounding (``atol=1e-5`` after 6 SGD steps), not bitwise.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.tensor  # the fsdp runs' results hold plain tensors, but import it for their pickles
from conftest import job_environment

SCRIPT = Path(__file__).parent / "compile_jobs" / "compiled_train.py"
ATOL = 1e-5

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run(out: Path, strategy: str) -> tuple[dict[str, object], dict[str, object]]:
    """One job trains the eager model, then the compiled one; returns (eager, compiled) results."""
    for mode in ("eager", "compiled"):
        (out / mode).mkdir(parents=True)
    environment = job_environment()
    finished = subprocess.run([sys.executable, str(SCRIPT), str(out), strategy], capture_output=True,
                              text=True, timeout=600, env=environment)
    assert finished.returncode == 0, finished.stderr[-4000:]
    eager, compiled = (torch.load(out / mode / "result.pt", weights_only=True) for mode in ("eager", "compiled"))
    return eager, compiled


@pytest.mark.parametrize(
    "strategy",
    [
        "single_device",
        pytest.param("ddp", marks=[pytest.mark.distributed, pytest.mark.skipif(
            importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")]),
        pytest.param("fsdp", marks=[pytest.mark.distributed, pytest.mark.skipif(
            importlib.util.find_spec("core_fsdp") is None, reason="core-fsdp is not installed")]),
        pytest.param("fsdp_blocks", marks=[pytest.mark.distributed, pytest.mark.skipif(
            importlib.util.find_spec("core_fsdp") is None, reason="core-fsdp is not installed")]),
        # The strategy's hooks get the engine deepspeed.initialize returned, not Lite's compiled wrapper around it.
        pytest.param("deepspeed_stage_2", marks=[pytest.mark.distributed, pytest.mark.skipif(
            importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")]),
        *(pytest.param(f"model_parallel_{shape}", marks=[pytest.mark.distributed, pytest.mark.skipif(
            importlib.util.find_spec("core_model_parallel") is None, reason="core-model-parallel is not installed")])
          for shape in ("1x2", "2x1")),
    ],
)
def test_a_compiled_model_trains_like_the_eager_one_and_checkpoints_plain_keys(tmp_path: Path, strategy: str) -> None:
    eager, compiled = run(tmp_path, strategy)
    assert compiled["keys"] == eager["keys"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name, value in eager["weights"].items():  # type: ignore[attr-defined]
        torch.testing.assert_close(compiled["weights"][name], value, atol=ATOL, rtol=0)  # type: ignore[index]
        torch.testing.assert_close(compiled["reloaded"][name], compiled["weights"][name], atol=0, rtol=0)  # type: ignore[index]
    # fsdp with blocks compiles each sharded block in place and leaves the root eager (torch's advice for FSDP2);
    # DeepSpeed compiles the module inside its engine (engine.compile()); elsewhere Lite compiles the whole module
    # (a wrapper around it: no submodule compiled in place).
    in_place = {"fsdp_blocks": ["0", "2"], "deepspeed_stage_2": [""]}.get(strategy, [])
    assert compiled["compiled_blocks"] == in_place, compiled["compiled_blocks"]
    assert eager["compiled_blocks"] == []
    # Compiled with the user's own backend (and so with their other settings), never torch's default: graphs went
    # through it. Before, Lite compiled again with torch's defaults, and none did.
    assert eager["graphs"] == [] and compiled["graphs"], compiled["graphs"]
