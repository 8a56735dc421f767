"""On a real CUDA device: ``Lite`` in ``32-true``, ``bf16-mixed``, ``16-mixed`` and ``bf16-true``, the ``16-mixed``
gradient scaler (a step with an inf gradient is skipped and the scale halves) and core-amp's float16 autocast path.

Marked ``gpu``: skipped with its reason where torch sees no CUDA device.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from core_amp import MixedPrecision
from torch import nn

from core import Lite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]

# precision -> (parameter dtype, dtype a Linear computes in)
PRECISIONS = {
    "32-true": (torch.float32, torch.float32),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
}


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def batch(lite: Lite) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return lite.to_device(torch.randn(32, 32, generator=generator)), lite.to_device(
        torch.randint(0, 4, (32,), generator=generator))


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_lite_trains_on_cuda_in_each_precision(precision: str) -> None:
    def body(lite: Lite) -> dict[str, Any]:
        module = net()
        seen: list[torch.dtype] = []
        module[0].register_forward_hook(lambda _module, _inputs, output: seen.append(output.dtype))
        model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
        inputs, targets = batch(lite)
        losses = []
        for _ in range(10):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            lite.backward(loss)
            optimizer.step()
            losses.append(float(loss.detach()))
        parameters = list(model.parameters())
        return {"devices": {str(p.device) for p in parameters}, "dtypes": {p.dtype for p in parameters},
                "computed": set(seen), "losses": losses}

    observed = Lite(accelerator="cuda", devices=1, precision=precision).launch(body)
    parameter_dtype, compute_dtype = PRECISIONS[precision]
    assert observed["devices"] == {"cuda:0"}
    assert observed["dtypes"] == {parameter_dtype}
    assert observed["computed"] == {compute_dtype}
    assert all(torch.isfinite(torch.tensor(observed["losses"])))
    assert observed["losses"][-1] < observed["losses"][0]


def test_16_mixed_skips_a_step_with_an_inf_gradient_and_halves_the_scale() -> None:
    def body(lite: Lite) -> dict[str, Any]:
        module = net()
        model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
        precision = lite.active.precision
        assert isinstance(precision, MixedPrecision)
        scaler = precision.scaler
        assert scaler is not None
        inputs, targets = batch(lite)

        def step(factor: float) -> None:
            optimizer.zero_grad()
            lite.backward(nn.functional.cross_entropy(model(inputs), targets) * factor)
            optimizer.step()

        step(1.0)
        scale_before = scaler.get_scale()
        weights_before = [p.detach().clone() for p in model.parameters()]
        step(float("inf"))  # every gradient inf or nan: GradScaler must not apply it
        skipped = all(torch.equal(before, p) for before, p in zip(weights_before, model.parameters(), strict=True))
        scale_after = scaler.get_scale()
        step(1.0)
        moved = not all(torch.equal(b, p) for b, p in zip(weights_before, model.parameters(), strict=True))
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        return {"scale_before": scale_before, "scale_after": scale_after, "skipped": skipped, "moved": moved,
                "scaler_device": scaler._device, "finite": finite}

    observed = Lite(accelerator="cuda", devices=1, precision="16-mixed").launch(body)
    assert observed["scaler_device"] == "cuda"
    assert observed["scale_before"] == 2.0**16  # GradScaler's initial scale, unchanged by one finite step
    assert observed["skipped"], "the step with an inf gradient changed the weights"
    assert observed["scale_after"] == observed["scale_before"] / 2
    assert observed["finite"]
    assert observed["moved"], "the finite step after the skipped one did not update the weights"


def test_core_amp_float16_path_autocasts_on_cuda_and_keeps_the_scaler_state() -> None:
    def body(lite: Lite) -> dict[str, Any]:
        precision = lite.active.precision
        assert isinstance(precision, MixedPrecision)
        a = lite.to_device(torch.randn(8, 8))
        with precision.precision_autocast():
            product = a @ a
        state = precision.precision_state_dict()
        precision.precision_load_state_dict({**state, "scale": 1024.0})
        scaler = precision.scaler
        assert scaler is not None
        return {"device_type": precision.device_type, "product": product.dtype, "state_scale": state["scale"],
                "loaded_scale": scaler.get_scale(), "product_device": str(product.device)}

    observed = Lite(accelerator="cuda", devices=1, precision="16-mixed").launch(body)
    assert observed["device_type"] == "cuda"
    assert observed["product"] == torch.float16
    assert observed["product_device"] == "cuda:0"
    assert observed["state_scale"] == 2.0**16
    assert observed["loaded_scale"] == 1024.0
