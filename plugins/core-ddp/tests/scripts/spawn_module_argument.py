"""A module passed to ddp_spawn's launch: each rank must own its weights, so one step lands once."""

from __future__ import annotations

import json
from typing import cast

import torch

from core import Lite


def train(lite: Lite, model: torch.nn.Module) -> list[float]:
    shared = any(parameter.is_shared() for parameter in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = lite.setup(model, optimizer)
    features = torch.ones(4, 3)
    optimizer.zero_grad()
    lite.backward(model(features).sum())
    optimizer.step()
    if shared:
        raise RuntimeError("the rank trains parameters in shared memory")
    return [float(value) for value in cast(torch.nn.Linear, model.module).weight.detach().flatten()]


if __name__ == "__main__":
    module = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.constant_(module.weight, 1.0)
    result = Lite(accelerator="cpu", strategy="ddp_spawn", devices=2).launch(train, module)
    print(json.dumps({"weights": result}))
