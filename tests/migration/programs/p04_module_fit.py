# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""A LightningModule fitted by the Trainer: training_step, validation_step, configure_optimizers, self.log."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = make_net()

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self(inputs), targets)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(inputs), targets), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def train_dataloader(self):
        return loader(regression_data(), batch_size=32 // self.trainer.world_size)

    def val_dataloader(self):
        return loader(regression_data(samples=32, seed=5), batch_size=16)


def main() -> None:
    out, devices = arguments()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), max_epochs=3, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, deterministic=True,
    )
    model = Regressor()
    trainer.fit(model)
    if trainer.is_global_zero:
        write_result(
            out,
            {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
             "val_loss": float(trainer.callback_metrics["val_loss"]), "lr": model.hparams.lr},
            model.net.state_dict(),
        )


if __name__ == "__main__":
    main()
