# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""overfit_batches limits training and validation to their first batches; max_time stops at a step and saves."""

import sys
import time
from typing import Any

import torch
from _common import arguments, loader, make_net, regression_data, write_result

import core.lightning as L
from core.lightning.pytorch.callbacks import ModelCheckpoint


class Recording(L.LightningModule):
    def __init__(self, sleep: float = 0.0) -> None:
        super().__init__()
        self.net = make_net()
        self.sleep = sleep
        self.train_inputs: list[Any] = []
        self.val_inputs: list[Any] = []

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        self.train_inputs.append(inputs[0, 0].item())
        time.sleep(self.sleep)
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def validation_step(self, batch, batch_idx):
        self.val_inputs.append(batch[0][0, 0].item())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out, _ = arguments()
    data = loader(regression_data(), batch_size=8)
    if sys.argv[3:] == ["max_time"]:
        checkpoint = ModelCheckpoint(dirpath=out / "ckpt", save_last=True)
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, max_time={"seconds": 2},
                            callbacks=[checkpoint], logger=False, enable_progress_bar=False)
        model = Recording(sleep=0.05)
        started = time.monotonic()
        trainer.fit(model, train_dataloaders=data)
        write_result(out, {"elapsed": time.monotonic() - started, "global_step": trainer.global_step,
                           "steps_seen": len(model.train_inputs), "last": checkpoint.last_model_path,
                           "interrupted": trainer.interrupted if hasattr(trainer, "interrupted") else None})
        return
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, overfit_batches=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0)
    model = Recording()
    trainer.fit(model, train_dataloaders=data, val_dataloaders=loader(regression_data(seed=9), batch_size=8))
    write_result(out, {"train_inputs": model.train_inputs, "val_inputs": model.val_inputs})


if __name__ == "__main__":
    main()
