"""``fast_dev_run`` as Lightning runs it: the run's loggers are replaced by a ``DummyLogger`` that records nothing, so
a Module that logs (``self.log``, ``self.logger.experiment...``) runs unchanged and nothing is written; with
``logger=False`` there is no logger at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import DummyLogger


class LogsEverything(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.seen_loggers: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.layer(inputs), targets)
        self.log("loss", loss)
        self.seen_loggers.append(self.logger)
        if self.logger is not None:
            self.logger.experiment.add_scalar("by_hand", 1.0)  # TensorBoard-style call on the experiment: a no-op
            self.logger.log_hyperparams({"by_hand": True})
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(root: Path, **flags: Any) -> tuple[core.Trainer, LogsEverything]:
    model = LogsEverything()
    trainer = core.Trainer(accelerator="cpu", devices=1, default_root_dir=root, fast_dev_run=2,
                           enable_progress_bar=False, enable_model_summary=False, **flags)
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2))
    return trainer, model


def test_the_loggers_become_one_dummy_logger_and_nothing_is_written(tmp_path: Path) -> None:
    trainer, model = _fit(tmp_path, logger=core.loggers.CSVLogger(tmp_path / "csv"))
    assert [type(logger) for logger in trainer.loggers] == [DummyLogger]
    assert isinstance(trainer.logger, DummyLogger)
    assert len(model.seen_loggers) == 2 and all(logger is trainer.logger for logger in model.seen_loggers)
    assert trainer.global_step == 2
    assert list(tmp_path.rglob("*")) == []


def test_without_loggers_fast_dev_run_has_none(tmp_path: Path) -> None:
    trainer, model = _fit(tmp_path, logger=False)
    assert trainer.loggers == [] and trainer.logger is None
    assert model.seen_loggers == [None, None]
