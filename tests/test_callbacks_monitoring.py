"""DeviceStatsMonitor, ModelSummary's sizes and modes, RichModelSummary and RichProgressBar: Lightning's names."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import DeviceStatsMonitor, ModelSummary, RichModelSummary, RichProgressBar
from core.loggers import Logger


class Recorder(Logger):
    def __init__(self) -> None:
        super().__init__(save_dir=".", name="recorder", version=0)
        self.records: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        assert step is not None, "the Trainer gives every log_metrics call its step"
        self.records.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any = None) -> None:
        pass


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(16, 2)
        self.example_input_array = torch.zeros(5, 6)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.encoder(inputs)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.cross_entropy(self(inputs), targets)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self(inputs), targets), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(size: int = 32) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(size, 6, generator=generator),
                                    torch.randint(0, 2, (size,), generator=generator)), batch_size=8)


def fit(tmp_path: Path, callbacks: list[Any], logger: Any = False, **flags: Any) -> Net:
    module = Net()
    trainer = core.Trainer(accelerator="cpu", max_epochs=1, logger=logger, callbacks=callbacks,
                           enable_checkpointing=False, default_root_dir=tmp_path, **flags)
    trainer.fit(module, loader(), loader(16))
    return module


def test_device_stats_monitor_logs_the_hosts_figures_around_logging_steps(tmp_path: Path) -> None:
    recorder = Recorder()
    fit(tmp_path, [DeviceStatsMonitor()], logger=recorder, log_every_n_steps=2, enable_progress_bar=False)
    stats = [(step, metrics) for step, metrics in recorder.records
             if any(key.startswith("DeviceStatsMonitor.") for key in metrics)]
    keys = {key for _, metrics in stats for key in metrics if key.startswith("DeviceStatsMonitor.")}
    assert keys == {f"DeviceStatsMonitor.{hook}/{stat}" for hook in ("on_train_batch_start", "on_train_batch_end")
                    for stat in ("cpu_vm_percent", "cpu_percent", "cpu_swap_percent")}
    # At the start of batches 0 and 2 and the end of batches 1 and 3 (global step divisible by log_every_n_steps),
    # each under its batch's number: the steps taken before it, as Lightning numbers them.
    assert sorted({step for step, _ in stats}) == [0, 1, 2, 3]
    for _, metrics in stats:
        for key, value in metrics.items():
            if key.startswith("DeviceStatsMonitor."):
                assert 0.0 <= value <= 100.0, key
    with pytest.raises(core.ConfigurationError, match="has none: give it a logger"):
        fit(tmp_path, [DeviceStatsMonitor()], logger=False, enable_progress_bar=False)


def test_the_model_summary_shows_modes_and_the_example_inputs_sizes(tmp_path: Path) -> None:
    summary = ModelSummary(max_depth=2)
    fit(tmp_path, [summary], enable_progress_bar=False)
    assert summary.summary is not None
    lines = summary.summary.splitlines()
    header = lines[0].split()
    assert header == ["Name", "Type", "Params", "Mode", "In", "sizes", "Out", "sizes"]
    row = next(line for line in lines if line.split()[1:3] == ["encoder.0", "Linear"])
    assert row.split()[3:] == ["112", "train", "[5,", "6]", "[5,", "16]"]  # 6*16+16, on the example (5, 6)
    head = next(line for line in lines if line.split()[1:3] == ["head", "Linear"])
    assert head.split()[-2:] == ["[5,", "2]"]
    assert "0.001 total estimated model params size (MB)" in summary.summary  # 146 float32 parameters
    assert "6 modules in train mode" in summary.summary


def test_rich_model_summary_draws_the_same_rows(tmp_path: Path) -> None:
    summary = RichModelSummary(max_depth=1, console_kwargs={"width": 100})
    fit(tmp_path, [summary], enable_progress_bar=False)
    assert summary.summary is not None
    assert "┃" in summary.summary or "│" in summary.summary  # a rich table
    for text in ("encoder", "Sequential", "112", "head", "34", "[5, 6]", "[5, 2]", "146 total params"):
        assert text in summary.summary, text


def test_rich_progress_bar_draws_epochs_and_validation_with_the_metrics(tmp_path: Path) -> None:
    stream = io.StringIO()
    bar = RichProgressBar(leave=True, console_kwargs={"file": stream, "force_terminal": False, "width": 160})
    fit(tmp_path, [bar])
    drawn = stream.getvalue()
    assert "Epoch 0" in drawn and "4/4" in drawn and "train_loss:" in drawn and "val_loss:" in drawn
    with pytest.raises(core.ConfigurationError, match="ProgressBar"):
        core.Trainer(accelerator="cpu", callbacks=[RichProgressBar(), core.callbacks.TQDMProgressBar()])
