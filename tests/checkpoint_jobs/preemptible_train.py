"""A 2-rank Lite loop with resumable checkpoints that a test preempts from outside (SIGTERM or SIGUSR1).

    python -m core.run --devices 2 preemptible_train.py OUT [--pace SECONDS]
    srun python -m core.run --devices 2 preemptible_train.py OUT --pace 0.1

Global rank 0 appends ``step N`` to OUT/steps.txt after every step, so a test knows when the run is under way;
``--pace`` sleeps that long after each step so that a signal lands in the middle of the run (it changes no
number). The model has dropout, the data is shuffled and noised: a resumed run is bitwise like an
uninterrupted one only if every generator and the loop's position come back. Rank 0 writes OUT/final.pt (the
trained weights) at the end, and OUT/resumed.txt (the step each start resumed at, one line per start).
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.fault_tolerance import ResumableCheckpoints

EPOCHS = 3
SAMPLES = 480  # 15 steps per epoch on 2 ranks of batch 16
EVERY = 10


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, 8, generator=generator)
    return TensorDataset(inputs, inputs[:, :2].sum(dim=1, keepdim=True).tanh())


def train(lite: core.Lite, out: Path, pace: float) -> None:
    network = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                  torch.nn.Linear(32, 1))
    network, optimizer = lite.setup(network, torch.optim.SGD(network.parameters(), lr=0.05, momentum=0.9))
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=16, shuffle=True))
    state = {"model": network, "optimizer": optimizer}
    checkpoints = ResumableCheckpoints(lite, out / "checkpoints", every_n_steps=EVERY,
                                       preemption_signals=(signal.SIGTERM, signal.SIGUSR1))
    step = checkpoints.restore(state)
    if lite.is_global_zero:
        with open(out / "resumed.txt", "a") as log:
            log.write(f"{step}\n")
    for epoch in range(checkpoints.epoch, EPOCHS):
        for inputs, targets in checkpoints.batches(loader, epoch):
            loss = torch.nn.functional.mse_loss(network(inputs + 0.01 * torch.randn_like(inputs)), targets)
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
            step += 1
            if lite.is_global_zero:
                with open(out / "steps.txt", "a") as log:
                    log.write(f"step {step}\n")
            time.sleep(pace)
            checkpoints.maybe_save(state, step)
    checkpoints.finish()
    if lite.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in network.state_dict().items()}, out / "final.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--pace", type=float, default=0.0)
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    core.seed_everything(7, verbose=False)
    core.Lite(accelerator="cpu", strategy="ddp", devices=2).launch(train, arguments.out, arguments.pace)


if __name__ == "__main__":
    main()
