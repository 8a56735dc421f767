"""A Trainer fit with FaultTolerance on 2 ddp processes; ``--preempt-at STEP --preempt-rank R`` sends SIGTERM to one.

``python trainer_preempt.py OUT [--preempt-at STEP --preempt-rank R]``: global rank 0 writes OUT/final.pt.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.fault_tolerance import FaultTolerance


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                          torch.nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layers(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Preempt(core.Callback):
    """SIGTERM to this process on global rank ``rank`` once step ``step`` is done (as a cluster would send it)."""

    def __init__(self, step: int, rank: int) -> None:
        self.step, self.rank = step, rank

    def on_train_batch_end(self, trainer: Any, module: core.Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--preempt-at", type=int, default=-1)
    parser.add_argument("--preempt-rank", type=int, default=0)
    arguments = parser.parse_args()
    out = Path(arguments.out)
    core.seed_everything(3, verbose=False)
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(256, 8, generator=generator)
    loader = DataLoader(TensorDataset(inputs, inputs[:, :2].sum(1, keepdim=True)), batch_size=16, shuffle=True)
    model = Net()
    # Callbacks' batch-end hooks run in list order, before the Module's (Lightning's order): the signal sent by
    # the first arrives before FaultTolerance looks, which then stops every rank after this very step.
    preempt = Preempt(arguments.preempt_at, arguments.preempt_rank)
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=3, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, default_root_dir=out,
                           callbacks=[preempt, FaultTolerance(every_n_train_steps=10)])
    trainer.fit(model, train_dataloaders=loader)
    if trainer.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in model.layers.state_dict().items()}, out / "final.pt")


if __name__ == "__main__":
    main()
