"""The digits task of examples/digits.py as a `core.Module` + `core.DataModule`, trained by `core.Trainer`.

    python examples/digits_trainer.py                                   # CPU, one process
    python examples/digits_trainer.py --precision bf16-true
    python examples/digits_trainer.py --strategy ddp --devices 2        # needs core-ddp

Scikit-learn's bundled 8x8 digits: no download at run time. The Trainer validates every epoch, keeps the
checkpoint with the best validation accuracy, and tests the final weights; logs (metrics.csv) and checkpoints
go under --root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import ModelCheckpoint, ProgressBar


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "core-digits-trainer"))
    parser.add_argument("--min-accuracy", type=float, default=0.95, help="exit with status 1 below this")
    return parser.parse_args(argv)


class DigitsData(core.DataModule):
    """1797 images of 8x8 pixels (0..16): 360 to test, 180 to validate, the rest to train (stratified)."""

    def __init__(self, batch_size: int, seed: int) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        images, labels = load_digits(return_X_y=True)
        seed = self.hparams.seed
        rest_x, test_x, rest_y, test_y = train_test_split(images / 16.0, labels, test_size=360, random_state=seed,
                                                          stratify=labels)
        train_x, val_x, train_y, val_y = train_test_split(rest_x, rest_y, test_size=180, random_state=seed,
                                                          stratify=rest_y)
        self.train, self.val, self.test = (
            TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))
            for x, y in ((train_x, train_y), (val_x, val_y), (test_x, test_y))
        )

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val, batch_size=256)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.test, batch_size=256)


class DigitsClassifier(core.Module):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(),
            torch.nn.Linear(128, 128), torch.nn.ReLU(),
            torch.nn.Linear(128, 10),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        images, labels = batch
        logits = self(images)
        # Epoch values are means weighted by batch size, summed across processes: exact over the whole set.
        self.log(f"{stage}_loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log(f"{stage}_acc", (logits.argmax(dim=1) == labels).float().mean(), prog_bar=True, sync_dist=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    core.seed_everything(args.seed, verbose=False)
    trainer = core.Trainer(
        accelerator=args.accelerator,
        strategy=args.strategy,
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        callbacks=[ModelCheckpoint(monitor="val_acc", mode="max"), ProgressBar(refresh_rate=0)],
        num_sanity_val_steps=0,
    )
    trainer.print(f"Resolved active set:\n{trainer.lite.active.config.summary()}")
    model, data = DigitsClassifier(lr=args.lr), DigitsData(batch_size=args.batch_size, seed=args.seed)
    trainer.fit(model, datamodule=data)
    accuracy = trainer.test(model, datamodule=data)[0]["test_acc"]
    best = trainer.checkpoint_callback
    assert best is not None  # given in callbacks above
    trainer.print(f"best validation accuracy {float(best.best_model_score or 0):.4f}: {best.best_model_path}")
    trainer.print(f"logs: {trainer.log_dir}")
    trainer.print(f"test accuracy: {accuracy:.4f}")
    if trainer.is_global_zero and accuracy < args.min_accuracy:
        trainer.print(f"test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
