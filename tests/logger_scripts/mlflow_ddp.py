"""Fit on 2 ddp processes with an MLFlowLogger on an sqlite store; rank 0 prints the run id."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import MLFlowLogger


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    generator = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 3, generator=generator), torch.randn(16, 1, generator=generator)),
                      batch_size=4)
    logger = MLFlowLogger(experiment_name="ddp", tracking_uri=f"sqlite:///{sys.argv[1]}/mlflow.db")
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=logger,
                           log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False,
                           enable_model_summary=False, default_root_dir=sys.argv[1])
    trainer.fit(Net(), data)
    if trainer.is_global_zero:
        print("RUN", logger.version_if_chosen, trainer.world_size)
