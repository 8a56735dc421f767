# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Gradient accumulation, gradient clipping by norm and a per-step LR scheduler, all from Trainer flags."""

from typing import Any

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.learning_rates: list[Any] = []

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def on_train_batch_start(self, batch, batch_idx):
        self.learning_rates.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main() -> None:
    out, devices = arguments()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), max_epochs=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, accumulate_grad_batches=2,
        gradient_clip_val=0.5, gradient_clip_algorithm="norm",
    )
    model = Regressor()
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=8 // devices))
    if trainer.is_global_zero:
        write_result(out, {"global_step": trainer.global_step, "learning_rates": model.learning_rates},
                     model.net.state_dict())


if __name__ == "__main__":
    main()
