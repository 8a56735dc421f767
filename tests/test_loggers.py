"""Loggers as a specification: the CSV has one row per logged step, TensorBoard's own reader finds the scalars,
hyperparameters from ``save_hyperparameters`` are written, and every run gets its own version directory."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import CSVLogger, TensorBoardLogger


class Regression(core.Module):
    def __init__(self, lr: float = 0.05, hidden: int = 4, note: object = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["note"])
        self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(inputs), targets))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def data(samples: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(samples, 3, generator=generator),
                                    torch.randn(samples, 1, generator=generator)), batch_size=4)


def fit(logger: object, root: Path, epochs: int = 3) -> core.Trainer:
    trainer = core.Trainer(accelerator="cpu", max_epochs=epochs, logger=logger, default_root_dir=root,
                           log_every_n_steps=2, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(Regression(hidden=5, note=object()), data(20), data(8))  # 5 steps per epoch
    return trainer


def test_the_csv_has_one_row_per_logged_step(tmp_path: Path) -> None:
    trainer = fit(True, tmp_path)
    logger = trainer.logger
    assert isinstance(logger, CSVLogger)
    with open(Path(logger.log_dir) / "metrics.csv") as file:
        rows = list(csv.DictReader(file))

    steps = [int(row["step"]) for row in rows]
    assert steps == sorted(set(steps)), "each step appears once, in order"
    # Step values every 2 steps, each under the count of steps before it (Lightning's numbering: the 2nd step's
    # values at 1); the end of each epoch adds its validation loss at its last step's number (4, 9, 14).
    assert steps == [1, 3, 4, 5, 7, 9, 11, 13, 14]
    by_step = {int(row["step"]): row for row in rows}
    assert by_step[4]["val_loss"] and not by_step[4]["train_loss"]
    assert by_step[9]["val_loss"] and by_step[9]["train_loss"], "values of the same step share its row"
    assert [row["epoch"] for row in rows] == ["0", "0", "0", "1", "1", "1", "2", "2", "2"]
    assert float(by_step[14]["val_loss"]) == pytest.approx(float(trainer.callback_metrics["val_loss"]))


def test_hyperparameters_are_written_and_each_run_gets_a_new_version(tmp_path: Path) -> None:
    first = fit(True, tmp_path, epochs=1)
    second = fit(True, tmp_path, epochs=1)
    assert first.log_dir.endswith("version_0") and second.log_dir.endswith("version_1")
    with open(Path(second.log_dir) / "hparams.json") as file:
        assert json.load(file) == {"lr": 0.05, "hidden": 5}


def test_rows_logged_before_and_after_a_new_column_are_all_written(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.log_metrics({"b": 2.0}, step=1)
    logger.log_metrics({"a": 3.0}, step=1)
    logger.log_metrics({"a": 4.0}, step=2)
    logger.finalize("success")
    with open(logger.metrics_file) as file:
        assert file.read().splitlines() == ["step,a,b", "0,1.0,", "1,3.0,2.0", "2,4.0,"]


def test_a_value_added_to_a_written_row_reaches_the_disk_without_finalize(tmp_path: Path) -> None:
    # litgpt's loop logs throughput and then the loss at one step, with flush_logs_every_n_steps=1 and no finalize
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"time": 0.5}, step=12)
    logger.log_metrics({"loss": 4.25}, step=12)
    with open(logger.metrics_file) as file:
        assert file.read().splitlines() == ["step,time,loss", "12,0.5,4.25"]


def test_tensorboard_event_files_hold_the_logged_scalars(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = fit(TensorBoardLogger(tmp_path), tmp_path)
    events = EventAccumulator(trainer.log_dir)
    events.Reload()
    assert {"train_loss", "val_loss", "epoch"} <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("train_loss")] == [1, 3, 5, 7, 9, 11, 13]  # Lightning's numbering
    last = events.Scalars("val_loss")[-1]
    assert last.step == 14 and last.value == pytest.approx(float(trainer.callback_metrics["val_loss"]), rel=1e-6)
    assert (Path(trainer.log_dir) / "hparams.json").exists()


def test_tensorboard_logger_without_tensorboard_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("core.loggers.tensorboard.tensorboard_available", lambda: False)
    with pytest.raises(core.ConfigurationError, match="pip install tensorboard"):
        TensorBoardLogger("logs")


def test_logger_false_writes_nothing(tmp_path: Path) -> None:
    fit(False, tmp_path, epochs=1)
    assert not (tmp_path / "logs").exists()


def test_a_bad_logger_argument_is_refused() -> None:
    with pytest.raises(core.ConfigurationError, match="logger='csv'"):
        core.Trainer(accelerator="cpu", logger="csv")
