"""A short in-process ``Lite`` run that the single-process kits use to try a plugin for real."""

from __future__ import annotations

import math
from typing import Any

import torch

import core


def _train(lite: core.Lite, steps: int) -> list[float]:
    torch.manual_seed(0)
    with lite.init_module():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module, optimizer = lite.setup(model, optimizer)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 8, generator=generator)
    targets = features.sum(dim=1, keepdim=True) / 4
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        output = module(lite.to_device(features))
        loss = torch.nn.functional.mse_loss(output.float(), lite.to_device(targets))
        lite.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def train_briefly(steps: int = 20, **settings: Any) -> list[float]:
    """Train a small regression for ``steps`` steps in this process; every loss must be finite."""
    settings.setdefault("accelerator", "cpu")
    settings.setdefault("strategy", "single_device")
    settings.setdefault("devices", 1)
    settings.setdefault("plugins", ["local"])
    lite = core.Lite(**settings)
    losses = lite.launch(_train, steps)
    assert losses is not None and all(math.isfinite(loss) for loss in losses), f"non-finite losses: {losses}"
    return losses
