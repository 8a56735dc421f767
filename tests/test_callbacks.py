"""Callbacks as a specification: which checkpoints ModelCheckpoint keeps, when EarlyStopping stops, what
LearningRateMonitor and the progress bars report."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, ProgressBar
from core.loggers import Logger


class Scripted(core.Module):
    """Trains a tiny layer and logs a scripted score at the end of every epoch."""

    def __init__(self, scores: list[float] | None = None, schedule: str | None = None) -> None:
        super().__init__()
        self.scores = scores or []
        self.schedule = schedule
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        if self.scores:
            self.log("score", self.scores[self.current_epoch])

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        if self.schedule is None:
            return optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.schedule}}


class Recorder(Logger):
    def __init__(self) -> None:
        super().__init__("unused")
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any = None) -> None:
        pass


def loader(samples: int = 4) -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(samples, 3)), batch_size=2)


def fit(module: core.Module, max_epochs: int, **flags: Any) -> core.Trainer:
    flags.setdefault("logger", False)
    flags.setdefault("enable_progress_bar", False)
    trainer = core.Trainer(accelerator="cpu", max_epochs=max_epochs, **flags)
    trainer.fit(module, loader())
    return trainer


def checkpoint_names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.ckpt"))


# -------------------------------------------------------------------------------------------------
# ModelCheckpoint
# -------------------------------------------------------------------------------------------------

SCORES = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0]


@pytest.mark.parametrize(("mode", "kept_epochs"), [("min", [3, 4]), ("max", [0, 5])])
def test_top_k_keeps_exactly_the_k_best_files(tmp_path: Path, mode: str, kept_epochs: list[int]) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", mode=mode, save_top_k=2, filename="{epoch}")
    fit(Scripted(SCORES), len(SCORES), callbacks=[callback])

    assert checkpoint_names(tmp_path) == [f"epoch={epoch}.ckpt" for epoch in kept_epochs]
    assert callback.best_k_models == {str(tmp_path / f"epoch={epoch}.ckpt"): SCORES[epoch] for epoch in kept_epochs}
    best = min(kept_epochs, key=SCORES.__getitem__) if mode == "min" else max(kept_epochs, key=SCORES.__getitem__)
    assert callback.best_model_path == str(tmp_path / f"epoch={best}.ckpt")
    assert callback.best_model_score == pytest.approx(SCORES[best])


def test_a_saved_checkpoint_holds_the_documented_state_and_loads_safely(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, filename="{epoch}-{score:.1f}")
    fit(Scripted(SCORES), 2, callbacks=[callback])
    assert checkpoint_names(tmp_path) == ["epoch=1-score=3.0.ckpt"]

    saved = torch.load(tmp_path / "epoch=1-score=3.0.ckpt", weights_only=True)
    assert {"format", "state_dict", "optimizer_states", "lr_schedulers", "loops", "rng", "rng_epoch_start",
            "callbacks", "hyper_parameters", "epoch", "global_step"} <= set(saved)
    assert saved["format"] == "core.trainer/1"
    assert saved["loops"] == {"epoch": 1, "global_step": 4, "batches_done": 2, "total_batches": 4,
                              "validated": True, "epoch_finished": True}
    assert saved["rng"]["torch"].shape[0] == 1, "one row of generator states per rank"
    assert callback.state_key in saved["callbacks"]


def test_without_monitor_only_the_latest_is_kept_and_last_is_written(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    fit(Scripted(), 3, callbacks=[callback])
    assert checkpoint_names(tmp_path) == ["epoch=2-step=6.ckpt", "last.ckpt"]
    assert callback.last_model_path == str(tmp_path / "last.ckpt")


def test_save_top_k_minus_one_keeps_every_step_checkpoint(tmp_path: Path) -> None:
    fit(Scripted(), 3, callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)])
    assert checkpoint_names(tmp_path) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"]


def test_a_monitored_metric_that_was_never_logged_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r"monitor='val_acc'.*logged: \['loss'"):
        fit(Scripted(), 1, callbacks=[ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")])


def test_model_checkpoint_refuses_settings_that_cannot_work() -> None:
    with pytest.raises(core.ConfigurationError, match="without a monitored metric"):
        ModelCheckpoint(save_top_k=3)
    with pytest.raises(core.ConfigurationError, match="not both"):
        ModelCheckpoint(every_n_epochs=1, every_n_train_steps=5)
    with pytest.raises(core.ConfigurationError, match="mode='average'"):
        ModelCheckpoint(mode="average")


def test_ckpt_path_best_loads_the_best_weights_for_testing(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, filename="{epoch}")
    module = Scripted(SCORES[:4])
    trainer = fit(module, 4, callbacks=[callback])
    best = torch.load(callback.best_model_path, weights_only=True)["state_dict"]

    seen: dict[str, torch.Tensor] = {}

    class Probe(Scripted):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            seen.update({name: value.clone() for name, value in self.state_dict().items()})

    probe = Probe()
    trainer.test(probe, loader(), ckpt_path="best")
    assert all(torch.equal(seen[name], value) for name, value in best.items())


# -------------------------------------------------------------------------------------------------
# EarlyStopping
# -------------------------------------------------------------------------------------------------


def test_early_stopping_stops_when_patience_runs_out() -> None:
    # Improves at epochs 0 and 1, then not by more than min_delta for 2 epochs: stop after epoch 3.
    scores = [5.0, 4.0, 4.5, 3.95, 1.0, 0.5, 0.1, 0.0]
    stopper = EarlyStopping(monitor="score", patience=2, min_delta=0.1)
    trainer = fit(Scripted(scores), len(scores), callbacks=[stopper], enable_checkpointing=False)
    assert stopper.stopped_epoch == 3
    assert trainer.current_epoch == 4, "epochs 0..3 ran"
    assert stopper.wait_count == 2 and stopper.best_score == 4.0


def test_early_stopping_waits_for_min_epochs() -> None:
    stopper = EarlyStopping(monitor="score", patience=1)
    trainer = fit(Scripted([3.0, 4.0, 4.0, 4.0, 4.0, 4.0]), 6, callbacks=[stopper], min_epochs=4,
                  enable_checkpointing=False)
    assert trainer.current_epoch == 4


@pytest.mark.parametrize(
    ("options", "epoch"),
    [({"stopping_threshold": 2.5}, 2), ({"divergence_threshold": 10.0, "mode": "min"}, 3), ({}, 4)],
)
def test_thresholds_and_non_finite_values_stop_at_once(options: dict[str, Any], epoch: int) -> None:
    scores = [5.0, 4.0, 2.0, 11.0, math.nan, 1.0]
    stopper = EarlyStopping(monitor="score", patience=100, **options)
    fit(Scripted(scores), len(scores), callbacks=[stopper], enable_checkpointing=False)
    assert stopper.stopped_epoch == epoch


def test_early_stopping_names_the_missing_metric() -> None:
    with pytest.raises(core.ConfigurationError, match=r"monitor='val_loss'.*Log it with self.log\('val_loss'"):
        fit(Scripted(), 2, callbacks=[EarlyStopping(monitor="val_loss")], enable_checkpointing=False)


# -------------------------------------------------------------------------------------------------
# LearningRateMonitor and progress bars
# -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_learning_rate_monitor_logs_the_rate_each_epoch_or_step_used(interval: str) -> None:
    recorder = Recorder()
    fit(Scripted(schedule=interval), 2, callbacks=[LearningRateMonitor()], logger=recorder, log_every_n_steps=1,
        enable_checkpointing=False)
    rates = [(step, metrics["lr-SGD"]) for step, metrics in recorder.rows if "lr-SGD" in metrics]
    if interval == "epoch":
        assert rates == [(0, 0.1), (2, 0.05)]  # at each epoch's start, under its first batch's step (Lightning's)
    else:
        assert rates == [(0, 0.1), (1, 0.05), (2, 0.025), (3, 0.0125)]  # under each batch's step, as in Lightning


def test_learning_rate_monitor_needs_a_logger() -> None:
    with pytest.raises(core.ConfigurationError, match="needs a logger"):
        fit(Scripted(), 1, callbacks=[LearningRateMonitor()], enable_checkpointing=False)


def test_the_plain_progress_bar_prints_steps_rate_eta_and_prog_bar_metrics() -> None:
    stream = io.StringIO()
    fit(Scripted(), 2, callbacks=[ProgressBar(refresh_rate=1, stream=stream)], enable_progress_bar=True,
        enable_checkpointing=False)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 * 2 + 2, lines  # a line per batch and one at each epoch's end
    assert re.fullmatch(r"epoch 2/2  step 2/2  [\d.]+ it/s  ETA \d:\d\d:\d\d  loss=[-\d.e]+", lines[-1]), lines[-1]


def test_the_tqdm_bar_is_the_default_when_tqdm_is_installed() -> None:
    pytest.importorskip("tqdm")
    from core.callbacks import TQDMProgressBar

    trainer = core.Trainer(accelerator="cpu", logger=False)
    assert isinstance(trainer.progress_bar_callback, TQDMProgressBar)
    stream = io.StringIO()
    fit(Scripted(), 1, callbacks=[TQDMProgressBar(stream=stream)], enable_progress_bar=True,
        enable_checkpointing=False)
    assert "epoch 1/1" in stream.getvalue() and "2/2" in stream.getvalue() and "loss=" in stream.getvalue()


def test_progress_bar_flags_conflicting_with_callbacks_are_refused() -> None:
    with pytest.raises(core.ConfigurationError, match="enable_progress_bar=False"):
        core.Trainer(accelerator="cpu", callbacks=[ProgressBar()], enable_progress_bar=False)
    with pytest.raises(core.ConfigurationError, match="enable_checkpointing=False"):
        core.Trainer(accelerator="cpu", callbacks=[ModelCheckpoint()], enable_checkpointing=False)
