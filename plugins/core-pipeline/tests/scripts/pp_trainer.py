"""The small transformer as a Module under the Trainer: a 2-stage pipeline on 2 processes, or one process.

    python pp_trainer.py LAYOUT OUT TAG EPOCHS [CHECKPOINT]

LAYOUT: ``GPipe`` or ``1F1B`` (``PipelineStrategy`` cutting the Module at ``net.layers.2``: 2 stages, 2 processes)
| ``one`` (one process, strategy ``auto``). The Module is written once for both: ``forward(tokens, target=None)``
returns the loss when given targets, so ``self(tokens, target=targets)`` in a step is the whole pipeline's step
under ``pipeline`` and a plain forward and loss on one process. Trains to EPOCHS (resuming from CHECKPOINT when
given) with a validation pass after every epoch and OUT/TAG/last.ckpt saved after every epoch; rank 0 writes
OUT/TAG-report.json: the loss of every training step with its global step, the validation loss of every epoch,
and what this rank's Module holds after fit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nd_transformer as nd
import torch
from torch.utils.data import DataLoader

import core
from core.callbacks import ModelCheckpoint

VALIDATION_SAMPLES = 16


class Language(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nd.model()
        self.losses: list[tuple[int, float]] = []
        self.validation: list[float] = []

    def forward(self, tokens: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.net(tokens)
        return logits if target is None else nd.loss_fn(logits, target)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, targets = batch
        loss = self(tokens, target=targets)
        self.losses.append((self.global_step, float(loss.detach())))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        tokens, targets = batch
        self.log("val_loss", self(tokens, target=targets))

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validation.append(float(self.trainer.callback_metrics["val_loss"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return nd.optimizer(self.parameters())


def main(layout: str, out: Path, tag: str, epochs: int, checkpoint: Path | None) -> None:
    if layout == "one":
        strategy: object = "auto"
        devices = 1
    else:
        from core_pipeline import PipelineStrategy

        strategy = PipelineStrategy(split_points=["net.layers.2"], schedule=layout, loss_fn=nd.loss_fn)
        devices = 2
    last = ModelCheckpoint(dirpath=out / tag, save_top_k=0, save_last=True)
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=devices, max_epochs=epochs, logger=False,
                           callbacks=[last], enable_progress_bar=False, num_sanity_val_steps=0,
                           default_root_dir=out)
    module = Language()
    train = DataLoader(nd.dataset(nd.STEPS // 2), batch_size=nd.GLOBAL_BATCH, shuffle=False)
    tokens, targets = nd.dataset(VALIDATION_SAMPLES // nd.GLOBAL_BATCH).tensors
    validation = DataLoader(torch.utils.data.TensorDataset(tokens + 0, targets), batch_size=nd.GLOBAL_BATCH)
    trainer.fit(module, train, validation, ckpt_path=checkpoint)
    holds = sorted(module.state_dict().keys())
    if trainer.global_rank == 0:
        report = {"losses": module.losses, "validation": module.validation, "holds": holds}
        (out / f"{tag}-report.json").write_text(json.dumps(report))
    if layout != "one" and checkpoint is None:  # (the first pipeline run only: its fixture reads either outcome)
        # This rank's Module holds its stage only now: a second set-up is refused with the way out.
        # Every rank raises it. Rank 1's error ends rank 1, and its launcher (rank 0) stops the job, unless rank 0's
        # own error got there first, which it then catches here: either way the message reaches the user.
        try:
            trainer.validate(module, validation)
        except core.CoreError as error:
            if trainer.global_rank == 0:
                (out / f"{tag}-again.json").write_text(json.dumps([type(error).__name__, str(error)]))


if __name__ == "__main__":
    layout, out, tag, epochs = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    main(layout, out, tag, epochs, Path(sys.argv[5]) if len(sys.argv) > 5 else None)
