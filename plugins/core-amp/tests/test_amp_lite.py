"""16-mixed and bf16-mixed through ``core.Lite`` on the CPU: training, gradient clipping, skipped steps,
checkpoints; and the digits example trained with bf16-mixed in one and in two processes."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from core_amp import MixedPrecision

import core
from core import discover

REPO = Path(__file__).resolve().parents[3]


def dataset(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(512, 8, generator=generator)
    labels = (features[:, 0] - features[:, 2] > 0).long()
    return features, labels


def make_lite(precision: str) -> core.Lite:
    return core.Lite(accelerator="cpu", devices=1, precision=precision)


def train(lite: core.Lite, steps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    inside: list[torch.dtype] = []
    model[0].register_forward_hook(lambda module, args, output: inside.append(output.dtype))
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.5))
    features, labels = lite.to_device(dataset())
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(features), labels)
        optimizer.zero_grad()
        lite.backward(loss)
        lite.clip_gradients(model, optimizer, max_norm=5.0)
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(features).argmax(dim=1) == labels).float().mean().item()
    return {
        "losses": losses,
        "inside": set(inside),
        "parameter_dtypes": {parameter.dtype for parameter in model.parameters()},
        "accuracy": accuracy,
        "output_dtype": model(features).dtype,
    }


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_lite_trains_in_mixed_precision_on_cpu(precision: str, dtype: torch.dtype) -> None:
    result = make_lite(precision).launch(train, 40)
    assert result is not None
    assert result["inside"] == {dtype}, "inside the training step the linear layer computes in the half dtype"
    assert result["parameter_dtypes"] == {torch.float32}
    assert result["output_dtype"] == torch.float32
    assert result["losses"][-1] < 0.5 * result["losses"][0], result["losses"]
    assert result["accuracy"] > 0.9


def _overflow_step(lite: core.Lite) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.5))
    features, labels = dataset()
    scaler = cast(MixedPrecision, lite.active.precision).scaler
    assert scaler is not None
    scale = scaler.get_scale()
    loss = torch.nn.functional.cross_entropy(model(features), labels)
    lite.backward(loss)
    model.weight.grad[0, 0] = math.inf
    before = model.weight.detach().clone()
    optimizer.step()
    return {"unchanged": torch.equal(before, model.weight.detach()), "scale": (scale, scaler.get_scale())}


def test_lite_skips_the_step_and_halves_the_scale_on_an_inf_gradient() -> None:
    result = make_lite("16-mixed").launch(_overflow_step)
    assert result is not None and result["unchanged"]
    assert result["scale"] == (65536.0, 32768.0)


def _save(lite: core.Lite, path: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    features, labels = dataset()
    for step in range(4):
        optimizer.zero_grad()
        lite.backward(torch.nn.functional.cross_entropy(model(features), labels))
        if step == 1:
            model.weight.grad.fill_(math.nan)  # one skipped step: the scale drops to 2**15
        optimizer.step()
    lite.save(path, {"model": model, "optimizer": optimizer, "step": 4})
    return dict(lite.active.hook.precision_state_dict())


def _load(lite: core.Lite, path: Path) -> dict[str, Any]:
    model = torch.nn.Linear(8, 2)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    lite.load(path, state)
    return {"precision": dict(lite.active.hook.precision_state_dict()), "step": state["step"]}


def test_lite_checkpoint_round_trip_restores_the_scaler(tmp_path: Path) -> None:
    path = tmp_path / "amp.ckpt"
    saved = make_lite("16-mixed").launch(_save, path)
    assert saved is not None and saved["scale"] == 2.0**15 and saved["_growth_tracker"] == 2
    fresh = make_lite("16-mixed")
    loaded = fresh.launch(_load, path)
    assert loaded == {"precision": saved, "step": 4}
    raw = torch.load(path, weights_only=True)
    assert raw["core/precision"] == saved, "the scaler state is a plain, weights_only-loadable entry"


def test_a_bf16_mixed_run_loads_a_16_mixed_checkpoint_and_ignores_its_scaler(tmp_path: Path) -> None:
    path = tmp_path / "amp.ckpt"
    make_lite("16-mixed").launch(_save, path)
    loaded = make_lite("bf16-mixed").launch(_load, path)
    assert loaded == {"precision": {}, "step": 4}


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "examples" / "digits.py"), "--epochs", "6", "--min-accuracy", "0.9", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_example_trains_with_bf16_mixed_in_one_process() -> None:
    result = run_example("--precision", "bf16-mixed", "--accelerator", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "precision      bf16-mixed" in result.stdout
    assert "test accuracy:" in result.stdout


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_example_trains_with_bf16_mixed_in_two_processes() -> None:
    if not any(info.distribution == "core-ddp" for info in discover().entries):
        pytest.skip("core-ddp is not installed (pip install --no-deps -e plugins/core-ddp)")
    result = run_example("--precision", "bf16-mixed", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "world size 2" in result.stdout and "precision      bf16-mixed" in result.stdout
    assert "test accuracy:" in result.stdout
