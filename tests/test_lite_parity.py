"""Parity: the same loop, raw and under `Lite` on one CPU device, ends with bitwise-identical weights.

The raw loop is written the way the precision documents itself: ``64-true`` and ``bf16-true`` convert the
module and the floating inputs to their dtype and hand outputs back in the default dtype (float32).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core

DTYPES = {"32-true": torch.float32, "64-true": torch.float64, "bf16-true": torch.bfloat16}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    yield


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(123)
    return TensorDataset(torch.randn(96, 10, generator=generator), torch.randint(0, 4, (96,), generator=generator))


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(data(), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(7))


def raw_loop(dtype: torch.dtype, epochs: int = 3) -> torch.nn.Module:
    model, optimizer = model_and_optimizer()
    model.to(dtype=dtype)
    batches = loader()
    for _ in range(epochs):
        for inputs, targets in batches:
            output = model(inputs.to(dtype)).to(torch.get_default_dtype())
            loss = F.cross_entropy(output, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def lite_loop(lite: core.Lite, epochs: int = 3) -> torch.nn.Module:
    model, optimizer = model_and_optimizer()
    model, optimizer = lite.setup(model, optimizer)
    batches = lite.setup_dataloaders(loader())
    for _ in range(epochs):
        for inputs, targets in batches:
            output = model(inputs)
            loss = F.cross_entropy(output, targets)
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
    return model.module


@pytest.mark.parametrize("precision", list(DTYPES))
def test_raw_and_lite_loops_end_with_bitwise_identical_weights(precision: str) -> None:
    expected = raw_loop(DTYPES[precision])
    actual = core.Lite(accelerator="cpu", devices=1, precision=precision).launch(lite_loop)
    assert actual is not None  # one process: rank 0's result

    initial, _ = model_and_optimizer()
    for (name, want), (_, got), (_, start) in zip(
        expected.named_parameters(), actual.named_parameters(), initial.named_parameters(), strict=True
    ):
        assert got.dtype == want.dtype == DTYPES[precision], name
        assert torch.equal(got, want), f"{precision}: parameter {name} differs"
        assert not torch.equal(got.float(), start), f"{name} did not train: the comparison would prove nothing"


def test_the_comparison_notices_a_single_different_step() -> None:
    expected = raw_loop(torch.float32, epochs=3)
    shorter = raw_loop(torch.float32, epochs=2)
    assert not all(torch.equal(a, b) for a, b in zip(expected.parameters(), shorter.parameters(), strict=True))
