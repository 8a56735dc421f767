"""LambdaCallback, Timer (and Trainer(max_time=)), ModelSummary, and Trainer(fast_dev_run=): Lightning's names."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import LambdaCallback, ModelSummary, Timer
from core.callbacks.timer import as_duration


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(samples: int = 32) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(samples, 2, generator=generator),
                                    torch.randn(samples, 1, generator=generator)), batch_size=4)


def trainer(tmp_path: Path, **flags: Any) -> core.Trainer:
    settings = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, **flags}
    return core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, **settings)


def test_lambda_callback_calls_its_functions_as_hooks(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    callback = LambdaCallback(
        on_train_epoch_end=lambda trainer, module: seen.append(("epoch", trainer.current_epoch)),
        on_fit_end=lambda trainer, module: seen.append(("fit", trainer.global_step)),
    )
    trainer(tmp_path, max_epochs=2, callbacks=[callback]).fit(Tiny(), train_dataloaders=data())
    assert seen == [("epoch", 0), ("epoch", 1), ("fit", 16)]
    with pytest.raises(core.ConfigurationError, match=r"LambdaCallback\(on_trian_end=...\): not callback hooks"):
        LambdaCallback(on_trian_end=print)


def test_max_time_stops_training_at_a_step_boundary(tmp_path: Path) -> None:
    class Slow(Tiny):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            if self.trainer.global_step == 3:
                cast(Timer, self.trainer.callbacks[0])._offset = 3600.0  # an hour has passed, as far as the Timer knows

    fitted = trainer(tmp_path, max_epochs=100, max_time="00:00:30:00")
    fitted.fit(Slow(), train_dataloaders=data())
    timer = fitted.callbacks[0]
    assert isinstance(timer, Timer) and timer.duration == timedelta(minutes=30)
    assert fitted.global_step == 4  # the batch that found the budget used still finished
    assert timer.time_remaining() is not None and timer.time_remaining() < 0  # type: ignore[operator]


def test_durations_are_read_as_lightning_reads_them() -> None:
    assert as_duration("01:02:03:04") == timedelta(days=1, hours=2, minutes=3, seconds=4)
    assert as_duration({"hours": 12}) == timedelta(hours=12)
    with pytest.raises(core.ConfigurationError, match="expected 'DD:HH:MM:SS'"):
        core.Trainer(accelerator="cpu", devices=1, max_time="twelve hours")


def test_model_summary_counts_parameters_per_layer(tmp_path: Path) -> None:
    summary = ModelSummary(max_depth=2)
    trainer(tmp_path, max_steps=1, callbacks=[summary]).fit(Tiny(), train_dataloaders=data())
    assert summary.summary is not None
    lines = summary.summary.splitlines()
    assert any(line.split()[1:4] == ["net.0", "Linear", "12"] for line in lines[2:])
    assert any(line.split()[1:4] == ["net.2", "Linear", "5"] for line in lines[2:])
    assert "17 trainable params" in summary.summary and "17 total params" in summary.summary


def test_fast_dev_run_runs_n_batches_once_and_writes_nothing(tmp_path: Path) -> None:
    seen = {"train": 0, "val": 0}

    class Counting(Tiny):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen["train"] += 1

        def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            seen["val"] += 1

    fast = core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, fast_dev_run=2, max_epochs=10,
                        enable_progress_bar=False)
    fast.fit(Counting(), train_dataloaders=data(), val_dataloaders=data())
    assert seen == {"train": 2, "val": 2} and fast.global_step == 2
    assert list(tmp_path.iterdir()) == [] and fast.checkpoint_callback is None
    assert [type(logger).__name__ for logger in fast.loggers] == ["DummyLogger"]  # as Lightning: records nothing
    with pytest.raises(core.ConfigurationError, match="fast_dev_run=-1: expected True/False or a number"):
        core.Trainer(accelerator="cpu", devices=1, fast_dev_run=-1)


def test_a_prediction_writer_gets_each_batchs_dataset_indices_also_when_shuffled(tmp_path: Path) -> None:
    from core.callbacks import BasePredictionWriter

    class Keep(BasePredictionWriter):
        def __init__(self, interval: str) -> None:
            super().__init__(interval)
            self.batches: list[tuple[list[int], int]] = []
            self.epoch: Any = None

        def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                               batch_idx: int, dataloader_idx: int) -> None:
            self.batches.append((batch_indices, batch_idx))
            assert torch.equal(batch[0], inputs[batch_indices])  # the indices name exactly this batch's samples

        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            self.epoch = (len(predictions), batch_indices)

    class Predicts(Tiny):
        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
            return self.net(batch[0])

    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(12, 2, generator=generator)
    shuffled = DataLoader(TensorDataset(inputs, torch.zeros(12, 1)), batch_size=5, shuffle=True)
    writer = Keep("batch_and_epoch")
    trainer(tmp_path, callbacks=[writer]).predict(Predicts(), shuffled)
    assert [index for _, index in writer.batches] == [0, 1, 2]
    seen = [i for indices, _ in writer.batches for i in indices]
    assert sorted(seen) == list(range(12)) and seen != list(range(12))  # shuffled, every sample once
    assert writer.epoch == (3, [[indices for indices, _ in writer.batches]])
    only_epoch = Keep("epoch")
    trainer(tmp_path, callbacks=[only_epoch]).predict(Predicts(), data(8))
    assert only_epoch.batches == [] and only_epoch.epoch[1] == [[[0, 1, 2, 3], [4, 5, 6, 7]]]
    with pytest.raises(core.ConfigurationError, match=r"write_interval='step'\): expected one of \['batch'"):
        Keep("step")
    with pytest.raises(core.ConfigurationError, match=r"does not override write_on_batch_end"):
        trainer(tmp_path, callbacks=[BasePredictionWriter("batch")]).predict(Predicts(), data(8))
