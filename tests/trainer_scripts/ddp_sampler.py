"""``python ddp_sampler.py true|false OUT``: 2 ddp processes fit one epoch with ``use_distributed_sampler=``; each
rank writes the sample indices it trained on to OUT/<flag>-<rank>.json (test_trainer_flags.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core

SAMPLES = 32


class Indices(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen += [int(value) for value in batch[1].flatten()]
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_end(self) -> None:
        out = Path(sys.argv[2]) / f"{sys.argv[1]}-{self.global_rank}.json"
        out.write_text(json.dumps(sorted(self.seen)))


if __name__ == "__main__":
    inputs = torch.arange(SAMPLES, dtype=torch.float32).unsqueeze(1)
    loader = DataLoader(TensorDataset(inputs, inputs.clone()), batch_size=4)
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           use_distributed_sampler=sys.argv[1] == "true")
    trainer.fit(Indices(), loader)
