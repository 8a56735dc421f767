"""The Trainer on fsdp (2 ranks) with the FaultTolerance callback: fit to MAX_STEPS, resuming if it can.

    python fsdp_trainer_job.py OUT MAX_STEPS

Checkpoints every 3 steps under OUT/resumable (sharded, through 'distributed'); rank 0 writes the whole
trained weights to OUT/final-<MAX_STEPS>.pt and the first step this run took to OUT/first-step-<MAX_STEPS>.txt.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback
from core.fault_tolerance import FaultTolerance


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(16, 3))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class Record(Callback):
    """Writes the first step taken and, at the end, the whole weights (gathered from every rank's shards)."""

    def __init__(self, out: Path, max_steps: int) -> None:
        self.out, self.max_steps = out, max_steps
        self.first: int | None = None

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.first = trainer.global_step if self.first is None else self.first

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        whole = {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().cpu()
                 for name, value in module.state_dict().items()}
        if trainer.is_global_zero:
            torch.save(whole, self.out / f"final-{self.max_steps}.pt")
            (self.out / f"first-step-{self.max_steps}.txt").write_text(str(self.first))


def main(out: Path, max_steps: int) -> None:
    core.seed_everything(3, verbose=False)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(128, 6, generator=generator), torch.randint(0, 3, (128,), generator=generator))
    callbacks = [FaultTolerance(out / "resumable", every_n_train_steps=3), Record(out, max_steps)]
    trainer = core.Trainer(accelerator="cpu", strategy="fsdp", devices=2, max_steps=max_steps, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, callbacks=callbacks)
    trainer.fit(Net(), DataLoader(data, batch_size=8, shuffle=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
