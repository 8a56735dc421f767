"""``Trainer(profiler=...)``: Lightning's profilers time the run's actions and report them per entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback
from core.profilers import AdvancedProfiler, PassThroughProfiler, PyTorchProfiler, SimpleProfiler

STEP_SLEEP = 0.02  # seconds each training_step sleeps, so that its share is known


def data(size: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(size, 4, generator=generator), torch.randn(size, 1, generator=generator)
    return DataLoader(TensorDataset(inputs, targets), batch_size=4)


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(STEP_SLEEP)
        inputs, targets = batch
        return F.mse_loss(self.layer(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", F.mse_loss(self.layer(inputs), targets))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Counting(Callback):
    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


def fit(profiler: object, tmp_path: Path, **flags: Any) -> core.Trainer:
    trainer = core.Trainer(accelerator="cpu", max_epochs=2, profiler=profiler, default_root_dir=tmp_path, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           num_sanity_val_steps=1, callbacks=[Counting()], **flags)
    trainer.fit(Net(), data(16), data(8))  # 4 training batches and 2 validation batches per epoch
    return trainer


def rows(report: str) -> dict[str, tuple[float, int, float]]:
    """The SimpleProfiler table: action -> (mean, calls, total)."""
    found = {}
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("Action", "Total"):
            found[cells[0]] = (float(cells[1]), int(cells[2]), float(cells[3]))
    return found


def test_the_simple_profiler_times_lightnings_actions_and_writes_its_report(tmp_path: Path) -> None:
    fit(SimpleProfiler(dirpath=tmp_path / "profiles", filename="perf"), tmp_path)
    report = (tmp_path / "profiles" / "fit-perf.txt").read_text()
    assert report.startswith("FIT Profiler Report")
    table = rows(report)
    calls = {name: count for name, (_, count, _) in table.items()}
    assert calls["run_training_epoch"] == 2
    for action in ("run_training_batch", "[Strategy]SingleDeviceStrategy.training_step",
                   "[Strategy]SingleDeviceStrategy.backward", "[LightningModule]Net.optimizer_step",
                   "[_TrainingEpochLoop].train_dataloader_next", "[Callback]Counting.on_train_batch_end"):
        assert calls[action] == 8, action
    assert calls["[Strategy]SingleDeviceStrategy.validation_step"] == 2 * 2 + 1  # each epoch, and the sanity check
    # Every next() on the loader, the one finding it exhausted included: (2 + 1) per epoch, (1 + 1) in the sanity check.
    assert calls["[_EvaluationLoop].val_next"] == 2 * (2 + 1) + (1 + 1)
    step_total = table["[Strategy]SingleDeviceStrategy.training_step"][2]
    assert step_total >= 8 * STEP_SLEEP  # the sleeps are inside it
    assert step_total <= table["run_training_batch"][2] <= table["run_training_epoch"][2]  # nested actions
    assert table["[Strategy]SingleDeviceStrategy.training_step"][0] == pytest.approx(step_total / 8, rel=1e-3)


def test_without_a_filename_global_rank_0_prints_each_entry_points_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = fit("simple", tmp_path)
    assert isinstance(trainer.profiler, SimpleProfiler)
    assert "FIT Profiler Report" in capsys.readouterr().out
    trainer.validate(Net(), data(8))
    printed = capsys.readouterr().out
    assert "VALIDATE Profiler Report" in printed and "[Strategy]SingleDeviceStrategy.validation_step" in printed
    assert "run_training_epoch" not in printed  # each entry point reports its own actions


def test_the_advanced_profiler_reports_cprofile_statistics_per_action(tmp_path: Path) -> None:
    fit(AdvancedProfiler(dirpath=tmp_path, filename="advanced", line_count_restriction=20), tmp_path)
    report = (tmp_path / "fit-advanced.txt").read_text()
    section = report.split("Profile stats for: [Strategy]SingleDeviceStrategy.training_step", 1)[1]
    section = section.split("Profile stats for:", 1)[0]
    assert "function calls" in section and "training_step" in section and "sleep" in section


def test_the_pytorch_profiler_reports_operators_and_writes_a_chrome_trace(tmp_path: Path) -> None:
    profiler = PyTorchProfiler(dirpath=tmp_path, filename="torch", row_limit=50)
    fit(profiler, tmp_path)
    report = (tmp_path / "fit-torch.txt").read_text()
    assert "aten::addmm" in report and "run_training_batch" in report
    trace = json.loads((tmp_path / "fit-torch.pt.trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"run_training_epoch", "[Strategy]SingleDeviceStrategy.training_step"} <= names


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"profiler": "xla"}, r"profiler='xla'.*expected one of \['advanced', 'pytorch', 'simple'\]"),
        ({"profiler": 3}, r"profiler=3.*core.profilers.Profiler"),
        ({"profiler": "simple", "barebones": True}, r"barebones=True, profiler='simple'"),
    ],
)
def test_bad_profiler_settings_are_refused(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=message):
        core.Trainer(accelerator="cpu", **flags)
    with pytest.raises(core.ConfigurationError, match="emit_nvtx=True"):
        PyTorchProfiler(emit_nvtx=True)


def test_no_profiler_wraps_nothing(tmp_path: Path) -> None:
    trainer = core.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False)
    assert isinstance(trainer.profiler, PassThroughProfiler) and trainer.active_profiler is None
    with trainer.profiler.profile("anything"):  # your own actions cost nothing and record nothing
        pass
    assert trainer.profiler.summary() == ""


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.skipif(__import__("importlib").util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_on_two_processes_each_rank_writes_its_own_report(tmp_path: Path) -> None:
    script = tmp_path / "profiled.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import core\nfrom test_profilers import Net, data\nfrom core.profilers import SimpleProfiler\n"
        "if __name__ == '__main__':\n"
        "    trainer = core.Trainer(accelerator='cpu', strategy='ddp', devices=2, max_epochs=1, logger=False,\n"
        "                           enable_checkpointing=False, enable_progress_bar=False,\n"
        "                           enable_model_summary=False,\n"
        f"                           profiler=SimpleProfiler(dirpath={str(tmp_path)!r}, filename='perf'))\n"
        "    trainer.fit(Net(), data(16))\n"
    )
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}}
    finished = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=200,
                              env={**environment, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-4000:]
    for rank in (0, 1):
        table = rows((tmp_path / f"fit-perf-{rank}.txt").read_text())
        assert table["[Strategy]DDPStrategy.training_step"][1] == 2, rank  # 16 samples, 8 per rank, batches of 4
    assert not re.search(r"fit-perf\.txt", " ".join(path.name for path in tmp_path.iterdir()))
