# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""ModelCheckpoint (top-k on a monitored metric), EarlyStopping, LearningRateMonitor and the CSV logger."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L
from core.lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from core.lightning.pytorch.loggers import CSVLogger


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        # A validation loss that stops improving after epoch 3, so that early stopping fires.
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("val_loss", loss if self.current_epoch <= 3 else loss + self.current_epoch, sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def main() -> None:
    out, devices = arguments()
    checkpoint = ModelCheckpoint(
        dirpath=out / "checkpoints", filename="{epoch}-{val_loss:.4f}", monitor="val_loss", mode="min",
        save_top_k=2, save_last=True,
    )
    stopping = EarlyStopping(monitor="val_loss", patience=2, mode="min")
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), max_epochs=20,
        callbacks=[checkpoint, stopping, LearningRateMonitor(logging_interval="epoch")],
        logger=CSVLogger(save_dir=out, name="csv"), enable_progress_bar=False, log_every_n_steps=1,
    )
    trainer.fit(
        Regressor(),
        train_dataloaders=loader(regression_data(), batch_size=16),
        val_dataloaders=loader(regression_data(samples=32, seed=5), batch_size=16),
    )
    if trainer.is_global_zero:
        write_result(
            out,
            {
                "stopped_epoch": stopping.stopped_epoch,
                "current_epoch": trainer.current_epoch,
                "best_model_path": checkpoint.best_model_path,
                "best_model_score": float(checkpoint.best_model_score),
                "best_k_models": {str(k): float(v) for k, v in checkpoint.best_k_models.items()},
                "last_model_path": checkpoint.last_model_path,
                "log_dir": trainer.logger.log_dir if trainer.logger is not None else None,
            },
        )


if __name__ == "__main__":
    main()
