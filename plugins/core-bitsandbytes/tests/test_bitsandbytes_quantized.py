"""4-bit and 8-bit weights on the CPU: their size, a frozen quantized base with trainable adapters, checkpoints.

Under ddp, adapters_job.py trains the adapters on 2 gloo processes (each rank on its own half of the batch).
What this does not cover: CUDA kernels (bitsandbytes' CPU backend computes the same formats).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from adapters_job import Adapter
from core_bitsandbytes import BitsandbytesPrecision

import core
from core.testing import PrecisionConformance


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))


def _bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict(keep_vars=True).values())


def test_nf4_weights_take_at_most_30_percent_of_bf16() -> None:
    lite = core.Lite(accelerator="cpu", devices=1, precision="nf4")
    quantized: list[Any] = list(lite.setup_module(_model()).module.children())
    plain = _model().to(torch.bfloat16)
    weights_nf4 = sum(_bytes(layer) - layer.bias.numel() * layer.bias.element_size() for layer in quantized
                      if hasattr(layer, "weight"))
    weights_bf16 = sum(layer.weight.numel() * 2 for layer in plain if isinstance(layer, torch.nn.Linear))
    assert weights_nf4 <= 0.30 * weights_bf16, f"nf4 weights take {weights_nf4} bytes, bf16 {weights_bf16}"


def _fit(lite: core.Lite, module: Any, optimizer: Any, steps: int) -> tuple[list[float], torch.Tensor]:
    """``steps`` optimizer steps on one fixed batch (regression to small targets): the losses, and the features."""
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 256, generator=generator)
    targets = torch.randn(64, 256, generator=generator) * 0.1
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(features).float(), targets)
        lite.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, features


@pytest.mark.parametrize("mode", ["nf4", "nf4-dq", "fp4", "int8"])
def test_adapters_on_a_quantized_base_train(mode: str) -> None:
    def train(lite: core.Lite) -> dict[str, Any]:
        module = lite.setup_module(_model())
        base: Any = module.module
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        base[0] = Adapter(base[0], 256, 512)  # adapters after setup, in float32, around the quantized layers
        base[2] = Adapter(base[2], 512, 256)
        trainable = [parameter for parameter in base.parameters() if parameter.requires_grad]
        optimizer = lite.setup_optimizers(torch.optim.AdamW(trainable, lr=1e-2))
        losses, _ = _fit(lite, module, optimizer, steps=15)
        frozen = [type(p).__name__ for p in base.parameters() if not p.requires_grad]
        return {"losses": losses, "trainable": len(trainable), "frozen": frozen}

    result = core.Lite(accelerator="cpu", devices=1, precision=mode).launch(train)
    assert result["trainable"] == 4
    assert result["losses"][-1] < 0.8 * result["losses"][0], f"{mode}: the adapters did not learn: {result['losses']}"


def test_under_float16_what_trains_stays_float32_and_computes_in_float32() -> None:
    # int8's compute dtype is float16: the frozen bias goes to float16; the adapter made before setup and the bias of
    # the second quantized layer, which train, stay float32 (their modules compute in float32 and hand float16 on),
    # and AdamW keeps them finite and learning.
    def train(lite: core.Lite) -> dict[str, Any]:
        model = _model()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        model[2].bias.requires_grad_(True)
        model[0] = Adapter(model[0], 256, 512)
        trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
        module, optimizer = lite.setup(model, torch.optim.AdamW(trainable, lr=1e-2))
        # (read before any forward: bitsandbytes' int8 layer casts its bias to its input's dtype as it runs)
        frozen_bias = str(module.module[0].base.bias.dtype)
        losses, features = _fit(lite, module, optimizer, steps=10)
        adapter = module.module[0]
        return {"losses": losses, "down": str(adapter.down.dtype), "frozen_bias": frozen_bias,
                "output": str(module(features).dtype), "hidden": str(adapter(features.half()).dtype),
                "trained_bias": str(module.module[2].bias.dtype), "layers": [type(adapter.base).__name__]}

    result = core.Lite(accelerator="cpu", devices=1, precision="int8").launch(train)
    assert result["layers"] == ["Linear8bitLt"]
    assert (result["down"], result["trained_bias"], result["frozen_bias"]) == (
        "torch.float32", "torch.float32", "torch.float16")
    assert result["hidden"] == "torch.float16"  # the next layer gets the compute dtype
    assert result["output"] == "torch.float32"  # precision_convert_output, as before
    losses = result["losses"]
    assert all(loss == loss for loss in losses) and losses[-1] < 0.8 * losses[0], losses


def test_a_quantized_checkpoint_is_plain_and_loads_back(tmp_path: Path) -> None:
    path = str(tmp_path / "nf4.ckpt")

    def save(lite: core.Lite) -> dict[str, Any]:
        module = lite.setup_module(_model())
        lite.save(path, {"model": module})
        return {key: (tuple(value.shape), str(value.dtype)) for key, value in torch.load(path).items()
                for key, value in value.items()}

    saved = core.Lite(accelerator="cpu", devices=1, precision="nf4").launch(save)
    assert saved == {key: (tuple(value.shape), "torch.float32") for key, value in _model().state_dict().items()}

    def load(lite: core.Lite) -> float:
        module = lite.setup_module(_model())
        lite.load(path, {"model": module})
        reference = _model()
        return float((module(torch.ones(4, 256)) - reference(torch.ones(4, 256))).abs().max())

    assert core.Lite(accelerator="cpu", devices=1, precision="nf4").launch(load) < 0.1


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("mode", "layer", "adapter_dtype"), [
    ("nf4", "Linear4bit", "torch.bfloat16"), ("fp4", "Linear4bit", "torch.bfloat16"),
    ("int8", "Linear8bitLt", "torch.float32"),
])
def test_adapters_on_a_quantized_base_train_under_ddp_on_two_processes(
    mode: str, layer: str, adapter_dtype: str, tmp_path: Path
) -> None:
    """The adapters exist at setup here (ddp wraps the whole model), so the precision decides their dtype: the compute
    dtype bfloat16 for the 4-bit modes; float32 under int8, whose compute dtype float16 cannot hold AdamW's updates
    (they turned the adapters NaN at the first steps when the precision gave them float16)."""
    out = tmp_path / "record.json"
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("adapters_job.py")), mode, str(out)],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, f"the {mode} ddp job failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    record = json.loads(out.read_text())
    assert record["world_size"] == 2 and record["trainable"] == 4
    assert record["layers"] == [layer] * 2, record["layers"]
    assert record["trainable_dtypes"] == [adapter_dtype], record["trainable_dtypes"]
    losses = record["losses"]
    assert losses[-1] < 0.8 * losses[0], f"{mode} under ddp: the adapters did not learn: {losses}"
    # Each rank saw a different half of the batch, so only averaged gradients leave the two ranks' adapters equal.
    assert record["adapters_moved"] > 0 and record["max_adapter_difference"] == 0.0, record


@pytest.mark.parametrize("strategy", ["fsdp", "model_parallel", "deepspeed"])
def test_sharding_strategies_are_refused_by_name(strategy: str) -> None:
    with pytest.raises(core.CoreError, match="cannot be sharded"):
        core.Lite(accelerator="cpu", strategy=strategy, devices=2, precision="nf4")


def test_bad_options_name_the_fix() -> None:
    with pytest.raises(core.ConfigurationError, match=r"compute in torch\.float16 only"):
        BitsandbytesPrecision("int8", dtype=torch.bfloat16)
    with pytest.raises(core.ConfigurationError, match="expected one of"):
        BitsandbytesPrecision("nf3")
    lite = core.Lite(accelerator="cpu", devices=1, precision="nf4")
    with pytest.raises(core.ConfigurationError, match="has none"):
        lite.setup_module(torch.nn.Sequential(torch.nn.ReLU()))


class TestNf4Conformance(PrecisionConformance):
    alias = "nf4"
    round_trip_rtol = 1e-2  # 4-bit rounding, as a fraction of the sum of magnitudes
