"""``trainer.save_checkpoint`` after a finished ``fit`` under DeepSpeed (2 ranks), and the resume from it.

    python deepspeed_save_after_fit_job.py STRATEGY OUT

A fit of 3 steps followed by two ``save_checkpoint`` calls (the second after the first's own run has given the
optimizer back again), each writing OUT/first and OUT/second. Rank 0 writes OUT/results.pt with the fitted weights.

Not yet here: the resume from those checkpoints up to 6 steps against a straight 6-step fit. The Trainer's
checkpoint state holds the Module and the optimizers in a list, not the DeepSpeed engine, so the strategy writes
it as any strategy would: one file from rank 0, with rank 0's ZeRO partition of the optimizer only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from deepspeed_entry_points_job import BATCH_SIZE, Net, data
from torch.utils.data import DataLoader

import core

SAVE_AT = 3


def fit(strategy: str, max_steps: int) -> tuple[core.Trainer, Net]:
    torch.manual_seed(0)
    module = Net()
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_steps=max_steps, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(module, DataLoader(data(64, 0), batch_size=BATCH_SIZE))
    return trainer, module


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def main(strategy: str, out: Path) -> None:
    trainer, stopped = fit(strategy, SAVE_AT)
    trainer.save_checkpoint(out / "first")
    trainer.save_checkpoint(out / "second")
    if trainer.is_global_zero:
        torch.save({"stopped": weights(stopped)}, out / "results.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
