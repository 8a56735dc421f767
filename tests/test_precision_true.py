"""The built-in ``-true`` precisions: parameters, floating inputs and computation all in one dtype.

Each test resolves a real run and calls the precision hooks the runtime calls (convert the module,
the init context, autocast around the forward, convert inputs and outputs, backward, step).
"""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

import core
from core.registry._discovery import Catalog, discover

TRUE_PRECISIONS = [("64-true", torch.float64), ("16-true", torch.float16), ("bf16-true", torch.bfloat16)]


def resolve(precision: object) -> core.ActiveSet:
    catalog = Catalog(tuple(info for info in discover().entries if info.distribution == "core"))
    return core.resolve(precision=precision, accelerator="cpu", catalog=catalog)


def model_with_buffers() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize(("precision", "dtype"), TRUE_PRECISIONS)
def test_convert_module_casts_floating_parameters_and_buffers_only(precision: str, dtype: torch.dtype) -> None:
    active = resolve(precision)
    model = active.hook.precision_convert_module(module=model_with_buffers())
    assert {parameter.dtype for parameter in model.parameters()} == {dtype}
    assert model[1].running_mean.dtype == dtype and model[1].running_var.dtype == dtype
    assert model[1].num_batches_tracked.dtype == torch.int64, "integer buffers keep their dtype"


@pytest.mark.parametrize(("precision", "dtype"), TRUE_PRECISIONS)
def test_convert_input_casts_floating_tensors_of_a_nested_batch(precision: str, dtype: torch.dtype) -> None:
    Pair = namedtuple("Pair", ["image", "label"])
    batch = {
        "features": torch.randn(2, 4),
        "ids": torch.arange(2),
        "pairs": [Pair(torch.ones(1, dtype=torch.float64), torch.tensor([1]))],
        "name": "batch-0",
    }
    converted = resolve(precision).hook.precision_convert_input(data=batch)
    assert converted["features"].dtype == dtype
    assert converted["ids"].dtype == torch.int64
    assert isinstance(converted["pairs"][0], Pair)
    assert converted["pairs"][0].image.dtype == dtype and converted["pairs"][0].label.dtype == torch.int64
    assert converted["name"] == "batch-0"
    torch.testing.assert_close(converted["features"].float(), batch["features"], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(("precision", "dtype"), TRUE_PRECISIONS)
def test_init_context_creates_parameters_in_the_dtype_and_restores_the_default(
    precision: str, dtype: torch.dtype
) -> None:
    active = resolve(precision)
    with active.hook.precision_tensor_init_context():
        layer = torch.nn.Linear(3, 3)
        assert torch.get_default_dtype() == dtype
    assert layer.weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32
    with pytest.raises(RuntimeError, match="boom"), active.hook.precision_tensor_init_context():
        raise RuntimeError("boom")
    assert torch.get_default_dtype() == torch.float32, "restored even when the block raises"


@pytest.mark.parametrize(("precision", "dtype"), TRUE_PRECISIONS)
def test_a_training_step_computes_in_the_dtype_and_outputs_float32(precision: str, dtype: torch.dtype) -> None:
    active = resolve(precision)
    model = active.hook.precision_convert_module(module=model_with_buffers())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(1)
    features = torch.randn(64, 4)
    labels = (features[:, 0] > 0).long()
    losses = []
    for _ in range(30):
        inputs = active.hook.precision_convert_input(data=features)
        with active.hook.precision_autocast():
            logits = model(inputs)
            inside = logits.dtype
        logits = active.hook.precision_convert_output(data=logits)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        assert active.hook.precision_backward(tensor=loss, module=model) is True
        active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={})
        losses.append(loss.item())
    assert inside == dtype and logits.dtype == torch.float32
    assert {parameter.dtype for parameter in model.parameters()} == {dtype}
    assert {parameter.grad.dtype for parameter in model.parameters() if parameter.grad is not None} == {dtype}
    assert losses[-1] < 0.8 * losses[0], losses
    assert active.hook.precision_state_dict() == {}


def test_32_true_changes_nothing() -> None:
    active = resolve("32-true")
    model = model_with_buffers()
    assert active.hook.precision_convert_module(module=model) is model
    batch = {"x": torch.randn(2, 2)}
    assert active.hook.precision_convert_input(data=batch) is batch
    with active.hook.precision_autocast():
        assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize(("spelling", "canonical"), [(64, "64-true"), ("64", "64-true"), (32, "32-true")])
def test_lightning_numeric_spellings_of_true_precisions(spelling: object, canonical: str) -> None:
    assert resolve(spelling).config.precision == canonical
