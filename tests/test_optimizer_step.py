"""``core.toolkit.strategies.optimizer_step``: a strategy steps an optimizer exactly once, whatever the precision.

The two traps it replaces are written out here too, so that the test shows why they are traps: calling the hook
never steps with a precision that lacks it, and stepping again on ``None`` steps twice with a built-in precision.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import core
from core.toolkit.strategies import optimizer_step


class BarePrecision:
    """A precision implementing no optional hook (the contract requires none of a precision)."""

    kind = "precision"
    name = "bare"


class ScalingPrecision:
    """A precision with its own step: skips the step on non-finite gradients, as a gradient scaler does."""

    kind = "precision"
    name = "scaling"

    @core.hookimpl
    def precision_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Any) -> Any:
        finite = all(torch.isfinite(p.grad).all() for group in optimizer.param_groups for p in group["params"])
        return optimizer.step(**kwargs) if finite else None


def _counting_optimizer() -> tuple[torch.optim.Optimizer, list[int]]:
    parameter = torch.nn.Parameter(torch.ones(2))
    parameter.grad = torch.ones(2)
    optimizer = torch.optim.SGD([parameter], lr=0.5)
    steps: list[int] = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    return optimizer, steps


@pytest.mark.parametrize("precision", [BarePrecision(), "32-true", "bf16-true", ScalingPrecision()],
                         ids=["no-optional-hooks", "32-true", "bf16-true", "own-step"])
def test_steps_exactly_once(precision: object) -> None:
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1, precision=precision)
    optimizer, steps = _counting_optimizer()
    optimizer_step(active, optimizer)
    assert len(steps) == 1
    assert optimizer.param_groups[0]["params"][0].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("precision", [BarePrecision(), "32-true"], ids=["no-optional-hooks", "32-true"])
def test_the_closure_runs_once_and_its_loss_is_returned(precision: object) -> None:
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1, precision=precision)
    optimizer, steps = _counting_optimizer()
    calls: list[int] = []

    def closure() -> torch.Tensor:
        calls.append(1)
        return torch.tensor(3.0)

    returned = optimizer_step(active, optimizer, closure=closure)
    assert (len(steps), len(calls), float(returned)) == (1, 1, 3.0)


def test_a_precision_may_skip_a_step() -> None:
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1, precision=ScalingPrecision())
    optimizer, steps = _counting_optimizer()
    optimizer.param_groups[0]["params"][0].grad = torch.tensor([1.0, float("inf")])
    optimizer_step(active, optimizer)
    assert steps == []


def test_the_traps_it_replaces() -> None:
    bare = core.resolve(accelerator="cpu", strategy="single_device", devices=1, precision=BarePrecision())
    optimizer, steps = _counting_optimizer()
    assert bare.hook.precision_optimizer_step(optimizer=optimizer, kwargs={}) is None
    assert steps == [], "calling the hook steps nothing when the precision lacks it"

    builtin = core.resolve(accelerator="cpu", strategy="single_device", devices=1, precision="32-true")
    optimizer, steps = _counting_optimizer()
    if builtin.hook.precision_optimizer_step(optimizer=optimizer, kwargs={}) is None:
        optimizer.step()
    assert len(steps) == 2, "a built-in precision returns optimizer.step()'s None: stepping again doubles it"
