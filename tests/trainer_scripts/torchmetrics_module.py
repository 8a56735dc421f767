"""A classifier logging torchmetrics objects, and a logger keeping what it is sent (tests/test_trainer_torchmetrics.py).

    python torchmetrics_module.py OUTPUT      # fit and validate on 2 ddp processes; rank 0 saves OUTPUT

Every rank keeps the predictions and targets of each training batch it saw, so that a test can compute the
accuracies by hand; in the 2-process run each rank saves them to OUTPUT.seen-<rank>, and rank 0 saves the weights
after fit and the metrics to OUTPUT.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import Logger

CLASSES = 4


def data(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(size, 6, generator=generator),
                         torch.randint(0, CLASSES, (size,), generator=generator))


class Classifier(core.Module):
    def __init__(self, update_only_on_step: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, CLASSES)
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=CLASSES, average="micro")
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=CLASSES, average="micro")
        self.update_only_on_step = update_only_on_step
        self.seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (epoch, predictions, targets)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        logits = self(inputs)
        self.seen.append((self.current_epoch, logits.argmax(dim=1).detach(), targets))
        if self.update_only_on_step:  # a mistake: on_step needs the batch's value, which update() does not give
            self.train_acc.update(logits, targets)
        else:
            self.train_acc(logits, targets)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        return F.cross_entropy(logits, targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.val_acc.update(self(inputs), targets)
        self.log("val_acc", self.val_acc)  # on_epoch by default here: compute() at the end, then reset

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Recorder(Logger):
    """Keeps every (step, metrics) it is sent."""

    def __init__(self) -> None:
        super().__init__(save_dir=".", name="recorder", version=0)
        self.records: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.records.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any = None) -> None:
        pass


def main(output: str) -> None:
    core.seed_everything(5, verbose=False)
    module = Classifier()
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=2, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           num_sanity_val_steps=0)
    validation = DataLoader(data(40, 2), batch_size=8)  # 20 samples per process
    trainer.fit(module, DataLoader(data(64, 1), batch_size=8), validation)
    fit_metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    validated = trainer.validate(module, validation)
    torch.save(module.seen, f"{output}.seen-{trainer.global_rank}")
    if trainer.is_global_zero:
        torch.save({"state": {name: value for name, value in module.state_dict().items() if "acc" not in name},
                    "fit": fit_metrics, "validate": validated}, output)


if __name__ == "__main__":
    main(sys.argv[1])
