"""OnExceptionCheckpoint and ThroughputMonitor: Lightning's names, files and metric keys, on real CPU runs."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import OnExceptionCheckpoint, ThroughputMonitor
from core.loggers import CSVLogger

FEATURES = 6
SCRIPTS = Path(__file__).parent / "trainer_scripts"
DISTRIBUTED_VARIABLES = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                         "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"}


def loader(samples: int = 32, batch_size: int = 4) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(samples, FEATURES, generator=generator), torch.randn(samples, 1, generator=generator)
    data = TensorDataset(inputs, targets)
    return DataLoader(data, batch_size=batch_size)


class Regression(core.Module):
    """A linear regression that can fail at a chosen global step, and sleep to make its batches measurable."""

    def __init__(self, fail_at_step: int | None = None, train_sleep: float = 0.0, eval_sleep: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(FEATURES, 1)
        self.fail_at_step = fail_at_step
        self.train_sleep = train_sleep
        self.eval_sleep = eval_sleep

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.fail_at_step:
            raise RuntimeError(f"failing at step {self.global_step}")
        time.sleep(self.train_sleep)
        inputs, targets = batch
        return F.mse_loss(self.layer(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.eval_sleep)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.eval_sleep)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def trainer(tmp_path: Path, callbacks: list[Any], **flags: Any) -> core.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu", "max_epochs": 3, "logger": False, "enable_checkpointing": False,
        "enable_progress_bar": False, "enable_model_summary": False, "default_root_dir": tmp_path,
        "num_sanity_val_steps": 0, **flags,
    }
    return core.Trainer(callbacks=callbacks, **settings)


# OnExceptionCheckpoint -----------------------------------------------------------------------------------------------


def test_an_exception_saves_a_checkpoint_of_the_step_it_happened_at_and_fit_resumes_from_it(tmp_path: Path) -> None:
    callback = OnExceptionCheckpoint(tmp_path / "saved")
    failing = Regression(fail_at_step=10)  # 8 batches per epoch: the third batch of the second epoch
    with pytest.raises(RuntimeError, match="failing at step 10"):
        trainer(tmp_path, [callback]).fit(failing, loader())
    assert callback.ckpt_path == str(tmp_path / "saved" / "on_exception.ckpt")
    saved = torch.load(callback.ckpt_path, weights_only=True)
    assert (saved["global_step"], saved["epoch"], saved["loops"]["batches_done"]) == (10, 1, 2)
    for name, tensor in failing.state_dict().items():  # the weights as they were when the step failed
        assert torch.equal(saved["state_dict"][name], tensor), name
    assert saved["optimizer_states"][0]["state"]  # momentum buffers: the optimizer's state is there too

    uninterrupted = Regression()
    trainer(tmp_path, []).fit(uninterrupted, loader())
    resumed = Regression()
    trainer(tmp_path, [OnExceptionCheckpoint(tmp_path / "saved")]).fit(resumed, loader(), ckpt_path=callback.ckpt_path)
    for name, tensor in uninterrupted.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name
    assert not Path(callback.ckpt_path).exists()  # as in Lightning: a run that ends cleanly deletes it


def test_on_exception_checkpoint_takes_lightnings_arguments(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match="cannot be empty"):
        OnExceptionCheckpoint(tmp_path, filename="")
    named = OnExceptionCheckpoint(tmp_path, filename="crash")
    assert named.ckpt_path == str(tmp_path / "crash.ckpt")
    assert isinstance(named, core.callbacks.Checkpoint)
    both = [OnExceptionCheckpoint(tmp_path / "a"), OnExceptionCheckpoint(tmp_path / "b")]  # distinct state keys
    with pytest.raises(RuntimeError):
        trainer(tmp_path, both, max_epochs=1).fit(Regression(fail_at_step=0), loader())
    assert (tmp_path / "a" / "on_exception.ckpt").exists() and (tmp_path / "b" / "on_exception.ckpt").exists()


# ThroughputMonitor ---------------------------------------------------------------------------------------------------


def read_metrics(logger: CSVLogger) -> list[dict[str, float]]:
    with open(logger.metrics_file, newline="") as file:
        return [{key: float(value) for key, value in row.items() if value != ""} for row in csv.DictReader(file)]


def rows_with(rows: list[dict[str, float]], key: str) -> list[dict[str, float]]:
    return [row for row in rows if key in row]


def test_throughput_metrics_reach_the_logger_with_lightnings_names_and_plausible_values(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), length_fn=lambda batch: batch[0].numel(),
                                window_size=3)
    module = Regression(train_sleep=0.01, eval_sleep=0.1)
    run = trainer(tmp_path, [monitor], max_epochs=1, logger=logger, log_every_n_steps=2, val_check_interval=4)
    with pytest.warns(core.CoreWarning, match="flops_per_batch"):
        run.fit(module, loader(), loader(16))
    rows = read_metrics(logger)

    train = rows_with(rows, "train/time")
    # every log_every_n_steps optimizer steps, at Lightning's step: the steps taken before this batch's
    assert [row["step"] for row in train] == [1, 3, 5, 7]
    for row in train:
        batches = row["step"] + 1
        counts = (row["train/batches"], row["train/samples"], row["train/lengths"])
        assert counts == (batches, 4 * batches, 4 * FEATURES * batches)
    rates = rows_with(train, "train/device/batches_per_sec")
    assert [row["step"] for row in rates] == [3, 5, 7]  # once the window of 3 batches is full
    for row in rates:
        # Each batch sleeps 10 ms, so no window can see more than 100 batches per second.
        assert 1.0 < row["train/device/batches_per_sec"] < 100.0
        assert row["train/device/samples_per_sec"] == pytest.approx(4 * row["train/device/batches_per_sec"])
        assert row["train/device/items_per_sec"] == pytest.approx(FEATURES * row["train/device/samples_per_sec"])
    assert not any(key in row for row in rows for key in ("train/batches_per_sec", "train/device/mfu"))  # 1 process

    validation = rows_with(rows, "validate/time")  # two validations of 4 batches, counted on: logged at 2, 4, 6, 8
    assert [row["validate/batches"] for row in validation] == [2, 4, 2, 4]
    validation_rates = rows_with(validation, "validate/device/batches_per_sec")
    assert len(validation_rates) == 2  # the 3-batch window fills at each validation's last batch
    assert all(0.5 < row["validate/device/batches_per_sec"] < 10.0 for row in validation_rates)  # 100 ms a batch
    first_validation = validation[1]["validate/time"]  # 4 batches of 100 ms, after training step 4
    assert first_validation >= 0.4
    # The training clock leaves validation out: steps 5 to 8 (4 x 10 ms) took less than the validation before them.
    assert train[-1]["train/time"] - train[1]["train/time"] < first_validation

    run.test(module, loader(16))
    test_rows = rows_with(read_metrics(logger), "test/time")
    assert [row["test/samples"] for row in test_rows] == [8, 16]


def test_flops_per_batch_gives_flops_per_second_and_bad_options_are_refused(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    module = Regression(train_sleep=0.005)
    module.flops_per_batch = 1000  # type: ignore[assignment]  # nn.Module types attributes as tensors or modules
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    trainer(tmp_path, [monitor], max_epochs=1, logger=logger, log_every_n_steps=1, limit_train_batches=4).fit(
        module, loader()
    )
    rates = rows_with(read_metrics(logger), "train/device/flops_per_sec")
    assert [row["step"] for row in rates] == [1, 2, 3]  # Lightning's numbering: the steps before this batch's
    for row in rates:  # over the same window: flops per second = flops per batch * batches per second
        assert row["train/device/flops_per_sec"] == pytest.approx(1000 * row["train/device/batches_per_sec"])
        assert "train/device/mfu" not in row  # a CPU has no peak in the table: no MFU
    with pytest.raises(core.ConfigurationError, match="window_size >= 2"):
        ThroughputMonitor(batch_size_fn=len, window_size=1)
    with pytest.raises(core.ConfigurationError, match=r"unknown option\(s\) \['available_flops'\]"):
        ThroughputMonitor(batch_size_fn=len, available_flops=1e12)


def test_a_device_with_known_peak_flops_gets_its_mfu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU's peak comes from core.lite.get_available_flops' table (tested in test_lightning_downstream.py); this
    # machine has no GPU, so the lookup is replaced here: what is covered is that the callback looks the peak up for
    # the run's device and precision dtype and divides by it, not the CUDA table itself.
    asked: list[tuple[str, torch.dtype]] = []

    def peak(device: torch.device, dtype: torch.dtype) -> int:
        asked.append((device.type, dtype))
        return 4000

    monkeypatch.setattr("core.lite._throughput.get_available_flops", peak)
    logger = CSVLogger(tmp_path)
    module = Regression(train_sleep=0.005)
    module.flops_per_batch = 1000  # type: ignore[assignment]
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=2)
    trainer(tmp_path, [monitor], max_epochs=1, logger=logger, log_every_n_steps=1, limit_train_batches=4,
            precision="64-true").fit(module, loader())
    assert asked == [("cpu", torch.float64)]
    rates = rows_with(read_metrics(logger), "train/device/mfu")
    assert len(rates) == 3
    for row in rates:
        assert row["train/device/mfu"] == pytest.approx(row["train/device/flops_per_sec"] / 4000)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
@pytest.mark.parametrize(("failing_rank", "backend"), [(-1, ""), (0, ""), (1, ""), (-1, "nccl")])
def test_on_two_processes_a_global_exception_is_saved_and_one_rank_s_ends_the_run_unsaved_without_hanging(
    tmp_path: Path, failing_rank: int, backend: str
) -> None:
    """The agreement runs over a gloo group of the callback's own; backend="nccl" makes the run's group look like
    NCCL's to the callback (a GPU run's), so only that group can agree (NCCL itself is not run: no GPU here)."""
    environment = {key: value for key, value in os.environ.items() if key not in DISTRIBUTED_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "on_exception_ddp.py"), str(failing_rank), str(tmp_path / "saved"),
         *([backend] if backend else [])],
        capture_output=True, text=True, timeout=240, env=environment,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0 and "failing on global rank" in result.stderr, result.stderr
    saved = tmp_path / "saved" / "on_exception.ckpt"
    if failing_rank == -1:  # both failed at the same step: the collective save went through
        assert torch.load(saved, weights_only=True)["global_step"] == 3
        assert "did not save" not in result.stderr
    else:  # the other process sat in the step's gradient all-reduce: no save, and no hang either
        assert not saved.exists()
        assert "did not save" in result.stderr and "not every process failed within 3 s" in result.stderr
        assert elapsed < 120, f"the run took {elapsed:.0f} s to end"  # the agreement waits 3 to 6 s, start-up aside
