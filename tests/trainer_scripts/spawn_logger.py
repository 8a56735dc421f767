"""Run by tests/test_trainer_ddp.py: fit under ddp_spawn with a CSVLogger, then say where the caller's logger points.

    python spawn_logger.py <root directory>

The ranks run in new processes, so the version rank 0's logger chose there must come back to the caller's logger.
Prints one JSON line: the caller's ``log_dir``, the version directories under ``<root>/logs``, and the state the
Trainer (core.lightning's, with Lightning's ``state``) reads after the spawned run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
import core.lightning as L
from core.loggers import CSVLogger


class Tiny(core.Module):
    def __init__(self, width: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root: str) -> None:
    os.makedirs(os.path.join(root, "logs", "version_0"))  # an earlier run's: this one takes version_1
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 2, generator=generator), torch.randn(16, 1, generator=generator))
    logger = CSVLogger(root)
    trainer = L.Trainer(
        accelerator="cpu", strategy="ddp_spawn", devices=2, max_epochs=1, logger=logger, log_every_n_steps=1,
        enable_checkpointing=False, enable_progress_bar=False, default_root_dir=root,
    )
    trainer.fit(Tiny(), train_dataloaders=DataLoader(data, batch_size=4))
    state: Any = trainer.state  # Lightning's TrainerState (core's Trainer types it as the run's name)
    print(json.dumps({"log_dir": logger.log_dir, "versions": sorted(os.listdir(os.path.join(root, "logs"))),
                      "state": [state.finished, state.fn == "fit"]}))


if __name__ == "__main__":
    main(sys.argv[1])
