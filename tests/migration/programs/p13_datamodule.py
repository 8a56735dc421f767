# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""A LightningDataModule (prepare_data, setup per stage, loaders) used by fit, validate and test."""

from typing import Any

import torch
from _common import arguments, classification_data, loader, strategy_for, write_result
from torch.utils.data import random_split

import core.lightning as L


class Digits(L.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.stages: list[Any] = []

    def prepare_data(self) -> None:
        self.prepared = True  # downloading would happen here, on one process per node

    def setup(self, stage: str) -> None:
        self.stages.append(stage)
        full = classification_data(samples=96)
        self.train, self.val, self.test = random_split(full, [64, 16, 16], generator=torch.Generator().manual_seed(0))

    def train_dataloader(self):
        return loader(self.train, self.hparams.batch_size)

    def val_dataloader(self):
        return loader(self.val, self.hparams.batch_size)

    def test_dataloader(self):
        return loader(self.test, self.hparams.batch_size)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))

    def _loss_and_accuracy(self, batch):
        inputs, labels = batch
        logits = self.net(inputs)
        return torch.nn.functional.cross_entropy(logits, labels), (logits.argmax(1) == labels).float().mean()

    def training_step(self, batch, batch_idx):
        return self._loss_and_accuracy(batch)[0]

    def validation_step(self, batch, batch_idx):
        loss, accuracy = self._loss_and_accuracy(batch)
        self.log_dict({"val_loss": loss, "val_acc": accuracy}, sync_dist=True)

    def test_step(self, batch, batch_idx):
        loss, accuracy = self._loss_and_accuracy(batch)
        self.log_dict({"test_loss": loss, "test_acc": accuracy}, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def main() -> None:
    out, devices = arguments()
    trainer = L.Trainer(accelerator="cpu", devices=devices, strategy=strategy_for(devices), max_epochs=5,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    data, model = Digits(), Classifier()
    trainer.fit(model, datamodule=data)
    validated = trainer.validate(model, datamodule=data)
    tested = trainer.test(model, datamodule=data)
    if trainer.is_global_zero:
        write_result(out, {"validated": validated, "tested": tested, "stages": data.stages,
                           "batch_size": data.hparams.batch_size}, model.net.state_dict())


if __name__ == "__main__":
    main()
