"""Run by tests/test_trainer_ddp.py on two processes: fit, then validate, with ``sync_dist=True`` validation losses.

    python ddp_validation.py <strategy> <output file>

Global rank 0 (of the launching process) writes the trained weights and the logged validation losses.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core

# 37 samples: 19 and 18 per process, 3 batches of 8 each. 33 samples: 17 and 16, so 3 batches against 2:
# the second process runs a filler batch, which must not count.
VALIDATION_SIZES = (37, 33)
BATCH_SIZE = 8


def data(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,), generator=generator))


def validation_loaders() -> list[DataLoader[Any]]:
    return [DataLoader(data(size, seed), batch_size=BATCH_SIZE) for seed, size in enumerate(VALIDATION_SIZES, 1)]


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self(inputs), targets), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(strategy: str, output: str) -> None:
    core.seed_everything(3, verbose=False)
    module = Net()
    trainer = core.Trainer(
        accelerator="cpu", strategy=strategy, devices=2, max_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, num_sanity_val_steps=1,
    )
    trainer.fit(module, DataLoader(data(64, 0), batch_size=BATCH_SIZE, shuffle=True), validation_loaders())
    in_fit = {name: float(value) for name, value in trainer.callback_metrics.items() if name.startswith("val_loss")}
    validated = trainer.validate(module, validation_loaders())
    if trainer.is_global_zero:
        torch.save({"state": module.state_dict(), "fit": in_fit, "validate": validated,
                    "world_size": trainer.world_size, "global_step": trainer.global_step}, output)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
