"""Train a small model with ``Lite(strategy="ddp")`` under an external launcher and report as JSON.

``python ddp_train_probe.py DEVICES NUM_NODES``, started by ``srun``, ``mpirun`` or ``torchrun`` (one
process per rank); the environment is detected, not named. Every rank prints one JSON line with the
detected environment, its ranks, the loss it reached and a digest of its final weights: DDP keeps the
replicas identical, so the digests must agree.
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

import core


def train(lite: core.Lite) -> dict[str, object]:
    lite.seed_everything(7, verbose=False)
    inputs = torch.randn(256, 8)
    targets = inputs @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1) + 0.1
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=32)
    model = torch.nn.Linear(8, 1)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    set_up = lite.setup_dataloaders(loader)
    first_loss = last_loss = None
    for _epoch in range(5):
        for batch_inputs, batch_targets in set_up:
            loss = torch.nn.functional.mse_loss(model(batch_inputs), batch_targets)
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
            last_loss = float(loss.detach())
            first_loss = last_loss if first_loss is None else first_loss
    weights = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
    return {
        "environment": lite.active.config.environment,
        "world_size": lite.world_size,
        "global_rank": lite.global_rank,
        "local_rank": lite.local_rank,
        "node_rank": lite.node_rank,
        "batches": len(set_up),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "digest": hashlib.sha256(weights.numpy().tobytes()).hexdigest(),
    }


def main() -> int:
    devices, num_nodes = int(sys.argv[1]), int(sys.argv[2])
    lite = core.Lite(accelerator="cpu", strategy="ddp", devices=devices, num_nodes=num_nodes)
    report: dict[str, object] = {}

    def run(lite: core.Lite) -> None:
        report.update(train(lite))

    lite.launch(run)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
