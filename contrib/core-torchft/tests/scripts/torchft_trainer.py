"""One replica group running a ``Trainer``: fit 2 epochs with a checkpoint, then resume from it for a
third; writes OUT/trainer.json with the Trainer's global step and the torchft manager's state in each checkpoint.

    python torchft_trainer.py OUT

The lighthouse and the group come from the environment (TORCHFT_LIGHTHOUSE, CORE_TORCHFT_HOST, ...).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from core_torchft import MANAGER_STATE_KEY
from torch.utils.data import DataLoader, TensorDataset

import core


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self.layer(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(out: Path, epochs: int, checkpoint: str | None) -> core.Trainer:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 6, generator=generator), torch.randint(0, 3, (64,), generator=generator))
    trainer = core.Trainer(
        accelerator="cpu", strategy="torchft_ddp", devices=1, max_epochs=epochs, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(out),
    )
    trainer.fit(Net(), DataLoader(data, batch_size=8), ckpt_path=checkpoint)
    return trainer


def saved(directory: Path) -> tuple[str, dict[str, Any]]:
    """The checkpoint the Trainer wrote in ``directory`` and the torchft manager's state in it."""
    (checkpoint,) = (directory / "checkpoints").glob("*.ckpt")
    return str(checkpoint), torch.load(checkpoint, weights_only=False)[MANAGER_STATE_KEY]


def main(out: Path) -> None:
    core.seed_everything(3, verbose=False)
    first = fit(out / "first", 2, None)
    checkpoint, first_manager = saved(out / "first")
    second = fit(out / "resumed", 3, checkpoint)
    result = {"first": [first.global_step, first_manager],
              "resumed": [second.global_step, saved(out / "resumed")[1]]}
    (out / "trainer.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
