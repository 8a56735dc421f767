"""``trainer.save_checkpoint`` after a finished ``fit`` under DeepSpeed (2 ranks), and the resume from it.

    python deepspeed_save_after_fit_job.py STRATEGY OUT

In the same two processes: a straight fit of 6 steps; a fit of 3 steps followed by two ``save_checkpoint`` calls,
OUT/first and OUT/second (the second in a run after the first's, which gave the optimizer back again); a fresh fit
resumed from OUT/second up to 6 steps; ``Lite.load(OUT/second)`` in one more run. Rank 0 writes OUT/results.pt: the
weights after each fit, the losses of the straight and the resumed fit, the consolidated weights of OUT/second.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from deepspeed_entry_points_job import BATCH_SIZE, Net, data
from torch.utils.data import DataLoader

import core
from core.callbacks import Callback

STEPS, SAVE_AT = 6, 3


class Losses(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs))  # training_step returns the loss tensor


def fit(strategy: str, max_steps: int, ckpt_path: Path | None = None) -> tuple[core.Trainer, Net, list[float]]:
    torch.manual_seed(0)
    module, losses = Net(), Losses()
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_steps=max_steps, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
                           callbacks=[losses])
    trainer.fit(module, DataLoader(data(64, 0), batch_size=BATCH_SIZE, shuffle=True), ckpt_path=ckpt_path)
    return trainer, module, losses.losses


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def main(strategy: str, out: Path) -> None:
    _, straight, straight_losses = fit(strategy, STEPS)
    trainer, stopped, _ = fit(strategy, SAVE_AT)
    trainer.save_checkpoint(out / "first")
    trainer.save_checkpoint(out / "second")
    _, resumed, resumed_losses = fit(strategy, STEPS, ckpt_path=out / "second")
    consolidated = core.Lite(accelerator="cpu", strategy=strategy, devices=2).launch(
        lambda lite: lite.load(out / "second")["state_dict"])  # Lite.load without objects: the full fp32 weights
    if trainer.is_global_zero:
        torch.save({"straight": weights(straight), "straight_losses": straight_losses, "stopped": weights(stopped),
                    "resumed": weights(resumed), "resumed_losses": resumed_losses, "consolidated": consolidated},
                   out / "results.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
