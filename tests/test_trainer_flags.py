"""Lightning's remaining Trainer flags: enable_model_summary, overfit_batches, benchmark, use_distributed_sampler,
detect_anomaly, sync_batchnorm, reload_dataloaders_every_n_epochs and barebones (semantics from Lightning 2.6's
trainer.py / trainer/setup.py / data_connector.py). One process; sync_batchnorm's statistics need CUDA (torch
refuses CPU tensors), so only its conversion and its refusal on CPU processes are covered here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import ModelSummary

SAMPLES = 32
SCRIPT = Path(__file__).parent / "trainer_scripts" / "ddp_sampler.py"


def data(shuffle: bool = False) -> DataLoader[Any]:
    # The targets are the sample indices, so a test can tell which samples a step saw.
    inputs = torch.arange(SAMPLES, dtype=torch.float32).unsqueeze(1)
    return DataLoader(TensorDataset(inputs, inputs.clone()), batch_size=4, shuffle=shuffle)


class Seen(core.Module):
    """Records the samples of every training and validation batch, and how often each loader was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.train_seen: list[list[int]] = []
        self.val_seen: list[list[int]] = []
        self.requests = {"train": 0, "val": 0}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_seen.append([int(value) for value in batch[1].flatten()])
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1] / SAMPLES)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_seen.append([int(value) for value in batch[1].flatten()])

    def train_dataloader(self) -> DataLoader[Any]:
        self.requests["train"] += 1
        return data(shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        self.requests["val"] += 1
        return data()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(tmp_path: Path, **flags: Any) -> core.Trainer:
    settings = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                "enable_model_summary": False, "num_sanity_val_steps": 0, **flags}
    return core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, **settings)


def test_the_model_summary_is_on_by_default_and_off_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = core.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                           enable_progress_bar=False, max_epochs=1, default_root_dir=tmp_path)
    assert sum(isinstance(callback, ModelSummary) for callback in default.callbacks) == 1
    default.fit(Seen())
    assert "21 trainable params" in capsys.readouterr().out
    assert not any(isinstance(callback, ModelSummary) for callback in trainer(tmp_path).callbacks)
    mine = ModelSummary(max_depth=2)
    assert [c for c in trainer(tmp_path, callbacks=[mine], enable_model_summary=True).callbacks
            if isinstance(c, ModelSummary)] == [mine]  # yours replaces the default


def test_overfit_batches_trains_and_validates_on_the_same_first_batches_every_epoch(tmp_path: Path) -> None:
    module = Seen()
    with pytest.warns(core.CoreWarning, match="shuffling is turned off"):
        trainer(tmp_path, max_epochs=3, overfit_batches=2, limit_train_batches=8).fit(module)
    first_two = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert module.train_seen == first_two * 3  # overfit_batches replaces limit_train_batches; no shuffling
    assert module.val_seen == first_two * 3
    fraction = Seen()
    with pytest.warns(core.CoreWarning):
        trainer(tmp_path, max_epochs=1, overfit_batches=0.25).fit(fraction)
    assert fraction.train_seen == first_two  # 25% of 8 batches
    with pytest.raises(core.ConfigurationError, match=r"overfit_batches=1.5: a fraction must lie in 0.0..1.0"):
        trainer(tmp_path, overfit_batches=1.5)


def test_reload_dataloaders_every_n_epochs_asks_the_module_again(tmp_path: Path) -> None:
    every_two = Seen()
    trainer(tmp_path, max_epochs=5, reload_dataloaders_every_n_epochs=2, limit_train_batches=1).fit(every_two)
    assert every_two.requests == {"train": 3, "val": 3}  # before epochs 0, 2 and 4
    once = Seen()
    trainer(tmp_path, max_epochs=5, limit_train_batches=1).fit(once)
    assert once.requests == {"train": 1, "val": 1}
    with pytest.raises(core.ConfigurationError, match=r"reload_dataloaders_every_n_epochs=-1: expected a whole"):
        trainer(tmp_path, reload_dataloaders_every_n_epochs=-1)


@pytest.mark.filterwarnings("ignore:Error detected in SqrtBackward0")
def test_detect_anomaly_names_the_operation_that_produced_a_nan(tmp_path: Path) -> None:
    class Broken(Seen):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.sqrt(self.net(batch[0]).sum() * 0 - 1)  # NaN in forward and backward

    with pytest.raises(RuntimeError, match="SqrtBackward0"):
        trainer(tmp_path, max_epochs=1, detect_anomaly=True).fit(Broken())
    assert not torch.is_anomaly_enabled()  # only during fit
    trainer(tmp_path, max_epochs=1, limit_train_batches=1).fit(Broken())  # without it: a NaN loss, no error


def test_benchmark_sets_cudnn_benchmark_and_deterministic_turns_it_off(tmp_path: Path) -> None:
    before = torch.backends.cudnn.benchmark
    try:
        trainer(tmp_path, max_epochs=1, limit_train_batches=1, benchmark=True).fit(Seen())
        assert torch.backends.cudnn.benchmark is True
        trainer(tmp_path, max_epochs=1, limit_train_batches=1).fit(Seen())
        assert torch.backends.cudnn.benchmark is True  # None leaves it as it is
        trainer(tmp_path, max_epochs=1, limit_train_batches=1, deterministic=True).fit(Seen())
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.backends.cudnn.benchmark = before
        torch.use_deterministic_algorithms(False)


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_use_distributed_sampler_decides_whether_ddp_ranks_split_the_data(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}}
    for flag in ("true", "false"):
        finished = subprocess.run([sys.executable, str(SCRIPT), flag, str(tmp_path)], capture_output=True, text=True,
                                  timeout=240, env={**environment, "OMP_NUM_THREADS": "1"})
        assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-3000:]
    split = [json.loads((tmp_path / f"true-{rank}.json").read_text()) for rank in (0, 1)]
    whole = [json.loads((tmp_path / f"false-{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(split[0] + split[1]) == list(range(SAMPLES)) and not set(split[0]) & set(split[1])
    assert whole[0] == whole[1] == list(range(SAMPLES))  # each rank reads its loader as given


def test_sync_batchnorm_converts_the_layers_and_refuses_cpu_processes(tmp_path: Path) -> None:
    module = Seen()
    trainer(tmp_path, max_epochs=1, limit_train_batches=2, sync_batchnorm=True).fit(module)
    assert isinstance(module.net[1], torch.nn.SyncBatchNorm)  # one process: it normalises like BatchNorm1d
    tracked = module.net[1].num_batches_tracked
    assert tracked is not None and tracked.item() == 2
    if importlib.util.find_spec("core_ddp") is not None:  # refused when the Trainer is made, before any process
        with pytest.raises(core.ConfigurationError, match=r"sync_batchnorm=True\) on 2 processes of device type 'cpu'"):
            core.Trainer(accelerator="cpu", strategy="ddp", devices=2, sync_batchnorm=True)


def test_barebones_turns_the_costly_features_off_and_refuses_them_when_asked(tmp_path: Path) -> None:
    bare = core.Trainer(accelerator="cpu", devices=1, barebones=True, max_epochs=1, default_root_dir=tmp_path)
    assert bare.barebones and bare.loggers == [] and bare.callbacks == [] and bare.num_sanity_val_steps == 0
    module = Seen()
    bare.fit(module)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "lightning_logs").exists()
    assert len(module.train_seen) == 8

    class Logs(Seen):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("loss", loss)
            return loss

    with pytest.raises(core.ConfigurationError, match=r"Logs.log\('loss'\) under Trainer\(barebones=True\)"):
        core.Trainer(accelerator="cpu", devices=1, barebones=True, max_epochs=1).fit(Logs())
    for flag, value in [("enable_checkpointing", True), ("logger", True), ("enable_progress_bar", True),
                        ("enable_model_summary", True), ("num_sanity_val_steps", 2), ("fast_dev_run", 1),
                        ("detect_anomaly", True)]:
        with pytest.raises(core.ConfigurationError, match=rf"barebones=True, {flag}={value!r}\)"):
            core.Trainer(accelerator="cpu", devices=1, barebones=True, **{flag: value})  # type: ignore[arg-type]
    assert math.isclose(trainer(tmp_path).num_sanity_val_steps, 0)
    assert core.Trainer(accelerator="cpu", devices=1, logger=False).num_sanity_val_steps == 2  # the default
