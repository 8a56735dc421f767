"""``ddp_sharded`` on 2 ranks next to plain DistributedDataParallel in the same processes, then a checkpoint.

    python sharded_lite.py OUT

Each rank trains the same model with Adam twice on its half of every global batch: through
``Lite(strategy="ddp_sharded")`` (OSS + ShardedDataParallel) and through torch's own ``DistributedDataParallel``
with a plain Adam on the same process group (what ``ddp`` does). It writes OUT/rank-N.json: both loss curves
(averaged over the ranks), the bytes of optimizer state each rank keeps, and the losses of RESUMED_STEPS more
steps taken after saving OUT/sharded.ckpt, which sharded_resume.py must reproduce on one process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import core

STEPS = 8
RESUMED_STEPS = 3
GLOBAL_BATCH = 32
WIDTH = 64
LR = 1e-2


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn((STEPS + RESUMED_STEPS) * GLOBAL_BATCH, WIDTH, generator=generator)
    return TensorDataset(inputs, inputs[:, :4].sum(dim=1, keepdim=True).tanh())


def model() -> torch.nn.Module:
    torch.manual_seed(3)
    layers: list[torch.nn.Module] = []
    for _ in range(4):  # 4 equal blocks: OSS's greedy partition gives each rank half of the elements
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    storages = {
        value.untyped_storage().data_ptr(): value.untyped_storage().nbytes()
        for state in optimizer.state.values() for value in state.values() if isinstance(value, torch.Tensor)
    }
    return sum(storages.values())


def global_loss(lite: core.Lite, loss: torch.Tensor) -> float:
    return float(lite.all_reduce(loss.detach(), reduce_op="mean"))


def train(lite: core.Lite, module: Any, optimizer: Any, batches: list[Any]) -> list[float]:
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(inputs), targets)
        lite.backward(loss)
        optimizer.step()
        losses.append(global_loss(lite, loss))
    return losses


def main(out: Path) -> None:
    lite = core.Lite(accelerator="cpu", strategy="ddp_sharded", devices=2)
    lite.launch()
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH // 2, shuffle=False))
    batches = list(loader)
    first, rest = batches[:STEPS], batches[STEPS:]

    network = model()
    module, optimizer = lite.setup(network, torch.optim.Adam(network.parameters(), lr=LR))
    sharded_losses = train(lite, module, optimizer, first)
    sharded_bytes = state_bytes(optimizer.optimizer.optim)
    owned = sum(p.numel() for group in optimizer.optimizer.optim.param_groups for p in group["params"])
    lite.save(out / "sharded.ckpt", {"model": module, "optimizer": optimizer, "step": STEPS})
    resumed_losses = train(lite, module, optimizer, rest)

    reference = DistributedDataParallel(model())  # what strategy="ddp" does, on the same process group
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=LR)
    reference_losses = []
    for inputs, targets in first:
        reference_optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(reference(inputs), targets)
        loss.backward()
        reference_optimizer.step()
        reference_losses.append(global_loss(lite, loss))
    report = {
        "world_size": lite.world_size,
        "sharded_losses": sharded_losses,
        "ddp_losses": reference_losses,
        "sharded_state_bytes": sharded_bytes,
        "ddp_state_bytes": state_bytes(reference_optimizer),
        "owned_elements": owned,
        "total_elements": sum(p.numel() for p in model().parameters()),
        "resumed_losses": resumed_losses,
        "optimizer_type": type(optimizer.optimizer).__name__,
    }
    (out / f"rank-{lite.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
