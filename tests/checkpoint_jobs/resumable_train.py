"""A Lite training loop with resumable checkpoints, killable at a chosen step; the fault-tolerance tests run it.

    torchrun --nproc-per-node 2 --max-restarts 3 resumable_train.py OUT [--kill-at STEP --kill-rank R]
    python resumable_train.py OUT --strategy single_device [--stop-at STEP] [--checkpoint-io async]

The model has dropout and the data is shuffled and augmented with noise, so that the random generators
matter. ``--kill-at`` SIGKILLs rank ``--kill-rank`` right after that step in the first attempt only (torchrun
counts attempts in TORCHELASTIC_RESTART_COUNT); ``--stop-at`` ends the run there without finishing, as a crash
would; ``--preempt-at`` sends SIGTERM to rank ``--preempt-rank`` only, after that step. Rank 0 writes
OUT/final.pt (the trained weights) and OUT/progress-<attempt>.txt.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.fault_tolerance import ResumableCheckpoints

EPOCHS = 3
SAMPLES = 320
EVERY = 10


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, 8, generator=generator)
    return TensorDataset(inputs, inputs[:, :2].sum(dim=1, keepdim=True).tanh())


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))


def train(lite: core.Lite, arguments: argparse.Namespace) -> None:
    out = Path(arguments.out)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    network = model()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.05, momentum=0.9)
    network, optimizer = lite.setup(network, optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=15, gamma=0.5)
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=16, shuffle=True))
    state = {"model": network, "optimizer": optimizer, "scheduler": scheduler}
    checkpoints = ResumableCheckpoints(lite, out / "checkpoints", every_n_steps=EVERY, keep=2)
    step = checkpoints.restore(state)
    log = [f"attempt {attempt} resumed at step {step} epoch {checkpoints.epoch}"]
    for epoch in range(checkpoints.epoch, EPOCHS):
        for inputs, targets in checkpoints.batches(loader, epoch):
            noisy = inputs + 0.01 * torch.randn_like(inputs)
            loss = torch.nn.functional.mse_loss(network(noisy), targets)
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
            scheduler.step()
            step += 1
            checkpoints.maybe_save(state, step)
            if step == arguments.kill_at and lite.global_rank == arguments.kill_rank and attempt == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == getattr(arguments, "preempt_at", -1) and lite.global_rank == arguments.preempt_rank:
                os.kill(os.getpid(), signal.SIGTERM)  # a preemption notice to this rank only
            if step == arguments.stop_at:
                return  # as if the process died here: no finish(), no final weights
    checkpoints.finish()
    if lite.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in network.state_dict().items()}, out / "final.pt")
        (out / f"progress-{attempt}.txt").write_text("\n".join([*log, f"finished at step {step}"]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--checkpoint-io", default=None)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--kill-rank", type=int, default=0)
    parser.add_argument("--stop-at", type=int, default=-1)
    parser.add_argument("--preempt-at", type=int, default=-1)
    parser.add_argument("--preempt-rank", type=int, default=0)
    arguments = parser.parse_args()
    devices = 1 if arguments.strategy == "single_device" else int(os.environ.get("LOCAL_WORLD_SIZE", "2"))
    plugins: list[object] | None = None
    if arguments.checkpoint_io == "async":  # the object: independent of how the alias is registered
        from core.builtin.async_checkpoint_io import AsyncCheckpointIO

        plugins = [AsyncCheckpointIO()]
    elif arguments.checkpoint_io:
        plugins = [arguments.checkpoint_io]
    core.seed_everything(7, verbose=False)
    core.Lite(accelerator="cpu", strategy=arguments.strategy, devices=devices, plugins=plugins).launch(train, arguments)


if __name__ == "__main__":
    main()
