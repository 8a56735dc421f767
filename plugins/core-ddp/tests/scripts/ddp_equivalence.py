"""DDP on 2 ranks x batch 32 must train exactly like 1 process x batch 64; the test compares the weights.

    python ddp_equivalence.py --strategy ddp --devices 2 --out DIR

Writes DIR/<variant>-rank<N>.pt for the variants ``plain`` (one backward per step) and ``accumulate``
(two micro-batches of 16 per rank, the first under ``no_backward_sync``). ``reference`` computes the
single-process result with a raw PyTorch loop; the test imports this file for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import core

STEPS = 50
GLOBAL_BATCH = 64
LR = 0.05


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(STEPS * GLOBAL_BATCH, 10, generator=generator)
    targets = inputs[:, :3].sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(len(inputs), 1, generator=generator)
    return TensorDataset(inputs, targets)


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def reference() -> dict[str, torch.Tensor]:
    """One process, batch 64, the same data order, plain PyTorch."""
    network = model()
    optimizer = torch.optim.SGD(network.parameters(), lr=LR)
    for inputs, targets in DataLoader(dataset(), batch_size=GLOBAL_BATCH, shuffle=False):
        loss = torch.nn.functional.mse_loss(network(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return network.state_dict()


def train_plain(lite: core.Lite) -> dict[str, torch.Tensor]:
    network = model()
    network, optimizer = lite.setup(network, torch.optim.SGD(network.parameters(), lr=LR))
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH // lite.world_size, shuffle=False))
    for inputs, targets in loader:
        loss = torch.nn.functional.mse_loss(network(inputs), targets)
        optimizer.zero_grad()
        lite.backward(loss)
        optimizer.step()
    return network.state_dict()


def train_accumulating(lite: core.Lite) -> dict[str, torch.Tensor]:
    micro_batches = 2
    network = lite.setup(model())
    optimizer = lite.setup_optimizers(torch.optim.SGD(network.parameters(), lr=LR))
    loader = lite.setup_dataloaders(
        DataLoader(dataset(), batch_size=GLOBAL_BATCH // lite.world_size // micro_batches, shuffle=False)
    )
    for index, (inputs, targets) in enumerate(loader):
        last = index % micro_batches == micro_batches - 1
        with lite.no_backward_sync(network, enabled=not last):
            lite.backward(torch.nn.functional.mse_loss(network(inputs), targets) / micro_batches)
        if last:
            optimizer.step()
            optimizer.zero_grad()
    return network.state_dict()


def run(lite: core.Lite, directory: Path) -> None:
    for variant, train in (("plain", train_plain), ("accumulate", train_accumulating)):
        state = {name.removeprefix("module."): tensor for name, tensor in train(lite).items()}
        torch.save(state, directory / f"{variant}-rank{lite.global_rank}.pt")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lite = core.Lite(accelerator="cpu", strategy=args.strategy, devices=args.devices, num_nodes=args.num_nodes)
    lite.launch(run, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
