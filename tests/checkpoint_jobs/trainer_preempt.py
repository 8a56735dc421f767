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
    def __init__(self, preempt_at: int, preempt_rank: int) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                          torch.nn.Linear(16, 1))
        self.preempt_at, self.preempt_rank = preempt_at, preempt_rank

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layers(inputs), targets)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_step == self.preempt_at and self.global_rank == self.preempt_rank:
            os.kill(os.getpid(), signal.SIGTERM)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


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
    model = Net(arguments.preempt_at, arguments.preempt_rank)
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=3, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, default_root_dir=out,
                           callbacks=[FaultTolerance(every_n_train_steps=10)])
    trainer.fit(model, train_dataloaders=loader)
    if trainer.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in model.layers.state_dict().items()}, out / "final.pt")


if __name__ == "__main__":
    main()
