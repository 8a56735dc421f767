"""A Trainer job: fit then validate on 2 ddp ranks, as Ray actors or launched locally; rank 0 writes OUT/trainer.pt.

    python ray_trainer.py OUT ray|local
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core


def data(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,), generator=generator))


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self(inputs), targets), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path, where: str) -> None:
    core.seed_everything(3, verbose=False)
    module = Net()
    trainer = core.Trainer(
        accelerator="cpu", strategy="ddp", devices=2, max_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, num_sanity_val_steps=0, plugins=["ray"] if where == "ray" else None,
    )
    trainer.fit(module, DataLoader(data(64, 0), batch_size=8, shuffle=True))
    validated = trainer.validate(module, DataLoader(data(40, 1), batch_size=8))
    if trainer.is_global_zero:
        torch.save({"state": module.state_dict(), "validate": validated, "global_step": trainer.global_step},
                   out / "trainer.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
