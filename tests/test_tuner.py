"""``Tuner``: lr_find sweeps the learning rate like a hand-written loop and restores the weights; scale_batch_size
finds the largest batch that fits (out-of-memory is simulated: this machine has no GPU to run out of)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
from core.tuner import LRFinder, Tuner


def dataset(size: int = 256) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(size, 8, generator=generator)
    return TensorDataset(inputs, inputs.sum(dim=1, keepdim=True).sin())


class Regressor(core.Module):
    def __init__(self, lr: float = 1e-3, batch_size: int = 4, fits_up_to: int | None = None, size: int = 256) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.lr = lr
        self.batch_size = batch_size
        self.fits_up_to = fits_up_to
        self.size = size
        self.trial_batch_sizes: list[int] = []  # the first batch of each fit
        self.first_batch = False

    def on_fit_start(self) -> None:
        self.first_batch = True

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        if self.first_batch:
            self.trial_batch_sizes.append(len(inputs))
            self.first_batch = False
        if self.fits_up_to is not None and len(inputs) > self.fits_up_to:
            raise torch.OutOfMemoryError(f"simulated: a batch of {len(inputs)} does not fit")
        return F.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(dataset(self.size), batch_size=self.batch_size)


def trainer(tmp_path: Path) -> core.Trainer:
    return core.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)


def by_hand(finder: LRFinder, steps: int) -> list[float]:
    """The sweep as a plain loop: each step at its learning rate, the loss smoothed (beta 0.98, bias-corrected)."""
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    average, smoothed = 0.0, []
    for step, (inputs, targets) in zip(range(steps), DataLoader(dataset(), batch_size=4), strict=False):
        for group in optimizer.param_groups:
            group["lr"] = finder.lr_at(step)
        optimizer.zero_grad()
        loss = F.mse_loss(model.net(inputs), targets)
        loss.backward()
        optimizer.step()
        average = 0.98 * average + 0.02 * float(loss.detach())
        smoothed.append(average / (1 - 0.98 ** (step + 1)))
    return smoothed


def test_lr_find_sweeps_like_a_plain_loop_stops_on_divergence_restores_and_suggests(tmp_path: Path) -> None:
    model = Regressor()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    finder = Tuner(trainer(tmp_path)).lr_find(model, min_lr=1e-4, max_lr=100.0, num_training=60)
    assert finder is not None
    steps = len(finder.results["loss"])
    assert 20 < steps < 60  # the loss blew up before lr 100 and the sweep stopped
    assert finder.results["lr"] == pytest.approx([1e-4 * 1e6 ** (i / 59) for i in range(steps)])
    assert finder.results["loss"] == pytest.approx(by_hand(finder, steps), rel=1e-5)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), f"{name} was not restored"
    suggested = finder.suggestion()
    assert suggested is not None and model.lr == suggested  # update_attr wrote it
    assert 1e-3 < suggested < 10

    def loss_after(lr: float) -> float:
        net = Regressor(lr=lr)
        core.Trainer(accelerator="cpu", max_steps=30, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False).fit(net)
        inputs, targets = dataset().tensors
        with torch.no_grad():
            return float(F.mse_loss(net.net(inputs), targets))

    assert loss_after(suggested) < loss_after(1e-4)  # the suggestion trains faster than the sweep's start
    assert finder.plot(suggest=True) is not None


def test_lr_find_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    class NoRate(Regressor):
        def __init__(self) -> None:
            super().__init__()
            del self.lr

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    tuner = Tuner(trainer(tmp_path))
    with pytest.raises(core.ConfigurationError, match=r"writes the suggestion to 'lr' or 'learning_rate'"):
        tuner.lr_find(NoRate())
    finder = tuner.lr_find(NoRate(), num_training=5, update_attr=False)
    assert finder is not None and finder.suggestion() is None  # too few points after skipping 10: no guess
    with pytest.raises(core.ConfigurationError, match=r"expected 0 < min_lr < max_lr"):
        tuner.lr_find(Regressor(), min_lr=1.0, max_lr=0.1)
    with pytest.raises(core.ConfigurationError, match=r"mode='cubic'"):
        tuner.lr_find(Regressor(), mode="cubic")


@pytest.mark.parametrize(("mode", "size", "expected", "tried"), [
    ("power", 256, 32, [2, 4, 8, 16, 32, 64]),
    ("binsearch", 256, 48, [2, 4, 8, 16, 32, 64, 48, 56, 52, 50, 49]),
    ("power", 40, 40, [2, 4, 8, 16, 32, 40]),  # capped at the dataset's length, which fits
])
def test_scale_batch_size_keeps_the_largest_batch_that_fits(
    tmp_path: Path, mode: str, size: int, expected: int, tried: list[int]
) -> None:
    model = Regressor(fits_up_to=48, size=size)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    found = Tuner(trainer(tmp_path)).scale_batch_size(model, mode=mode, steps_per_trial=2)
    assert found == expected and model.batch_size == expected
    assert model.trial_batch_sizes == tried
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), f"{name} was not restored"


def test_scale_batch_size_refuses_what_it_cannot_scale_and_lets_other_errors_through(tmp_path: Path) -> None:
    tuner = Tuner(trainer(tmp_path))
    with pytest.raises(core.ConfigurationError, match="builds the loaders again"):
        tuner.scale_batch_size(Regressor(), train_dataloaders=DataLoader(dataset()))
    with pytest.raises(core.ConfigurationError, match=r"has 'bs'"):
        tuner.scale_batch_size(Regressor(), batch_arg_name="bs")
    with pytest.raises(core.ConfigurationError, match=r"even batch_size=2 runs out of memory"):
        tuner.scale_batch_size(Regressor(fits_up_to=1))

    class Broken(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug, not memory"):
        tuner.scale_batch_size(Broken())
    assert not math.isnan(Regressor().lr)


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(__import__("importlib").util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_on_two_processes_lr_find_agrees_on_every_rank_and_fit_follows(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    script = Path(__file__).parent / "trainer_scripts" / "tune_ddp.py"
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}}
    finished = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                              timeout=240, env={**environment, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"out-{rank}").read_text()) for rank in (0, 1)]
    assert ranks[0]["results"] == ranks[1]["results"]  # the loss is averaged over the processes before recording
    assert ranks[0]["lr"] == ranks[1]["lr"] == LRFinder("exponential", 1e-4, 100.0, 40).lr_at(
        ranks[0]["results"]["lr"].index(ranks[0]["lr"]))
    assert 5 < len(ranks[0]["results"]["loss"]) < 40
    assert "scale_batch_size() runs on one process" in ranks[0]["refused"]
    assert ranks[0]["global_step"] == 256 // 4 // 2  # the real fit ran after the sweep, on both processes


def test_under_fast_dev_run_both_tuners_skip_with_a_warning_and_change_nothing(tmp_path: Path) -> None:
    model = Regressor(lr=0.5, batch_size=4)
    tuner = Tuner(core.Trainer(accelerator="cpu", fast_dev_run=True, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=tmp_path))
    with pytest.warns(core.CoreWarning, match="Skipping learning rate finder since `fast_dev_run` is enabled"):
        assert tuner.lr_find(model) is None
    with pytest.warns(core.CoreWarning, match="Skipping batch size scaler since `fast_dev_run` is enabled"):
        assert tuner.scale_batch_size(model) is None
    assert (model.lr, model.batch_size, model.trial_batch_sizes) == (0.5, 4, [])  # nothing ran, nothing changed
