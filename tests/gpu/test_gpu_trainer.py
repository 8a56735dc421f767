"""On a real CUDA device: the ``Trainer`` in each precision, ``DeviceStatsMonitor``'s CUDA memory keys and the
digits demo through ``Trainer(accelerator="gpu")``.

Marked ``gpu``: skipped with its reason where torch sees no CUDA device.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import DeviceStatsMonitor
from core.loggers import Logger

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits_trainer.py"
PRECISIONS = {
    "32-true": (torch.float32, torch.float32),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
}


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, 32)
        self.head = nn.Linear(32, 2)
        self.seen: list[tuple[str, torch.dtype, torch.dtype]] = []
        self.losses: list[float] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.hidden(inputs)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        hidden = self.hidden(inputs)
        self.seen.append((str(inputs.device), self.hidden.weight.dtype, hidden.dtype))
        loss = F.cross_entropy(self.head(F.relu(hidden)), targets)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 16, generator=generator)
    return DataLoader(TensorDataset(inputs, (inputs[:, 0] > 0).long()), batch_size=16)


class Recorder(Logger):
    def __init__(self) -> None:
        super().__init__(save_dir=".", name="recorder", version=0)
        self.records: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.records.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any = None) -> None:
        pass


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_the_trainer_fits_on_cuda_in_each_precision(precision: str, tmp_path: Path) -> None:
    module = Net()
    trainer = core.Trainer(accelerator="cuda", devices=1, precision=precision, max_epochs=3, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(module, loader())
    parameter_dtype, compute_dtype = PRECISIONS[precision]
    assert set(module.seen) == {("cuda:0", parameter_dtype, compute_dtype)}
    assert len(module.losses) == 12
    assert all(torch.isfinite(torch.tensor(module.losses)))
    assert sum(module.losses[-4:]) < sum(module.losses[:4])


def test_device_stats_monitor_logs_cuda_memory_statistics(tmp_path: Path) -> None:
    recorder = Recorder()
    trainer = core.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=recorder, log_every_n_steps=2,
                           callbacks=[DeviceStatsMonitor()], enable_checkpointing=False, enable_progress_bar=False,
                           default_root_dir=tmp_path)
    trainer.fit(Net(), loader())
    stats = {key: value for _, metrics in recorder.records for key, value in metrics.items()
             if key.startswith("DeviceStatsMonitor.")}
    for hook in ("on_train_batch_start", "on_train_batch_end"):
        for stat in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                     "num_alloc_retries"):
            assert f"DeviceStatsMonitor.{hook}/{stat}" in stats, sorted(stats)[:20]
    assert stats["DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current"] > 0  # the model is there
    assert not any(key.endswith("cpu_percent") for key in stats)  # host figures only when asked for


@pytest.mark.timeout(240)
def test_the_digits_demo_reaches_95_percent_through_the_trainer_on_the_gpu(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE")}
    result = subprocess.run([sys.executable, str(DIGITS), "--root", str(tmp_path), "--accelerator", "gpu",
                             "--devices", "1", "--max-epochs", "10"], capture_output=True, text=True, timeout=200,
                            env=environment)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"accelerator\s+(cuda|gpu)\s", result.stdout), result.stdout[-3000:]
    found = re.findall(r"^test accuracy: (\d\.\d{4})$", result.stdout, flags=re.MULTILINE)
    assert len(found) == 1 and float(found[0]) >= 0.95, result.stdout[-3000:]
