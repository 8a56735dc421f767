"""The Trainer with the diloco extension: ddp, 2 processes as 2 groups of 1, ``H = 2``.

    python diloco_trainer_job.py OUT MAX_STEPS SAVE_AT [RESUME_FROM]

Fits to MAX_STEPS (resuming from the checkpoint RESUME_FROM when given); after step SAVE_AT (0: never)
``trainer.save_checkpoint`` writes OUT/at-<SAVE_AT>.ckpt from inside the fit. At the end each rank writes its
parameters to OUT/rank-<rank>-<MAX_STEPS>.pt (the groups differ between synchronisations) and rank 0 writes
OUT/traffic-<MAX_STEPS>.txt, the bytes it sent across groups in this fit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from core_diloco import DiLoCoExtension
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class Record(Callback):
    def __init__(self, out: Path, max_steps: int, save_at: int, extension: DiLoCoExtension) -> None:
        self.out, self.max_steps, self.save_at, self.extension = out, max_steps, save_at, extension

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.save_at:
            trainer.save_checkpoint(self.out / f"at-{self.save_at}.ckpt")

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        parameters = [parameter.detach().clone() for parameter in module.parameters()]
        torch.save(parameters, self.out / f"rank-{trainer.global_rank}-{self.max_steps}.pt")
        if trainer.is_global_zero:
            (self.out / f"traffic-{self.max_steps}.txt").write_text(str(self.extension.traffic.bytes))


def main(out: Path, max_steps: int, save_at: int, resume_from: str | None) -> None:
    core.seed_everything(3, verbose=False)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(128, 6, generator=generator), torch.randint(0, 3, (128,), generator=generator))
    extension = DiLoCoExtension(replicas=2, sync_every=2)
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_steps=max_steps, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, plugins=[extension],
                           callbacks=[Record(out, max_steps, save_at, extension)])
    trainer.fit(Net(), DataLoader(data, batch_size=8, shuffle=False), ckpt_path=resume_from)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
