"""Train a small regression model with Lite and write rank 0's result to OUT/result.json.

    python ray_train.py OUT STRATEGY DEVICES ray|local [NUM_NODES]

``ray``: the ranks run as Ray actors (``plugins=["ray"]``, the cluster from RAY_ADDRESS); ``local``: the strategy
launches them itself on this machine. Both runs see the same data in the same order, so they must end with the
same weights.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from core_ray import RayLauncher
from torch.utils.data import DataLoader, TensorDataset

from core import Lite

GLOBAL_BATCH = 64
EPOCHS = 2


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    features = torch.randn(640, 16, generator=generator)
    targets = torch.tanh(features @ torch.randn(16, 4, generator=generator))
    return TensorDataset(features, targets)


def full(tensor: torch.Tensor) -> list[float]:
    whole = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # FSDP shards are DTensors
    return [float(value) for value in whole.detach().cpu().flatten().tolist()]


def train(lite: Lite) -> dict[str, Any] | None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH // lite.world_size))
    for _ in range(EPOCHS):
        for features, targets in loader:
            optimizer.zero_grad()
            lite.backward(torch.nn.functional.mse_loss(module(features), targets))
            optimizer.step()
    state = {name: full(value) for name, value in module.state_dict().items()}
    pids = lite.all_gather(torch.tensor([os.getpid(), os.getppid()])).tolist()
    if lite.global_rank != 0:
        return None
    return {
        "state": state,
        "pids": [pid for pid, _ in pids],
        "parents": [parent for _, parent in pids],
        "world_size": lite.world_size,
        "environment": lite.active.config.environment,
        "strategy": lite.active.config.strategy,
    }


def main(out: Path, strategy: str, devices: int, where: str, num_nodes: int) -> None:
    plugins = [RayLauncher(node_placement="PACK")] if where == "ray" else None
    lite = Lite(accelerator="cpu", strategy=strategy, devices=devices, num_nodes=num_nodes, plugins=plugins)
    result = lite.launch(train)
    if result is not None:  # the launching process (local: global rank 0 itself; ray: the driver)
        result["driver_pid"] = os.getpid()
        (out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 1)
