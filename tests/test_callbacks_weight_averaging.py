"""StochasticWeightAveraging, WeightAveraging and EMAWeightAveraging: the averages they leave in the Module, checked
against averages computed by hand from the weights recorded during real CPU runs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, cast

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import (
    Callback,
    EMAWeightAveraging,
    ModelCheckpoint,
    OnExceptionCheckpoint,
    StochasticWeightAveraging,
    WeightAveraging,
)

BATCHES = 8  # per epoch


def loader(samples: int = 4 * BATCHES) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(samples, 6, generator=generator), torch.randn(samples, 1, generator=generator))
    return DataLoader(data, batch_size=4)


class Net(core.Module):
    def __init__(self, batch_norm: bool = True, scheduler: bool = False, fail_at_step: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        middle: list[nn.Module] = [nn.BatchNorm1d(8)] if batch_norm else []
        self.net = nn.Sequential(nn.Linear(6, 8), *middle, nn.Tanh(), nn.Linear(8, 1))
        self.scheduler = scheduler
        self.fail_at_step = fail_at_step
        self.validation_weights: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.fail_at_step:
            raise RuntimeError("interrupted")
        inputs, targets = batch
        return F.mse_loss(self.net(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.validation_weights.append(copy.deepcopy(self.net.state_dict()))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        if not self.scheduler:
            return optimizer
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class Recorder(Callback):
    """The weights after every optimizer step and at the start of every epoch, and each epoch's learning rate."""

    def __init__(self) -> None:
        self.after_step: list[dict[str, torch.Tensor]] = []
        self.epoch_start: list[dict[str, torch.Tensor]] = []
        self.lrs: list[float] = []

    def on_train_epoch_start(self, trainer: core.Trainer, module: core.Module) -> None:
        self.epoch_start.append(copy.deepcopy(module.state_dict()))

    def on_train_batch_start(self, trainer: core.Trainer, module: core.Module, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def on_train_batch_end(
        self, trainer: core.Trainer, module: core.Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.after_step.append(copy.deepcopy(module.state_dict()))


def trainer(tmp_path: Path, callbacks: list[Any], max_epochs: int, **flags: Any) -> core.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu", "logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
        "enable_model_summary": False, "default_root_dir": tmp_path, "num_sanity_val_steps": 0, **flags,
    }
    return core.Trainer(callbacks=callbacks, max_epochs=max_epochs, **settings)


def assert_same(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(found[name], tensor, msg=name)


def mean(tensors: list[torch.Tensor]) -> torch.Tensor:
    return cast(torch.Tensor, sum(tensors)) / len(tensors)


def params(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value for name, value in state.items() if "running" not in name and "num_batches" not in name}


# EMAWeightAveraging --------------------------------------------------------------------------------------------------


def hand_ema(states: list[dict[str, torch.Tensor]], decay: float, steps: list[int]) -> dict[str, torch.Tensor]:
    """The EMA of ``states[step]`` over ``steps`` (the first update copies), in each tensor's dtype."""
    average = {name: value.clone() for name, value in states[steps[0]].items()}
    for step in steps[1:]:
        for name, value in states[step].items():
            average[name].copy_(decay * average[name] + (1 - decay) * value)
    return average


def test_ema_matches_a_hand_computed_average_in_validation_at_the_end_and_in_checkpoints(tmp_path: Path) -> None:
    recorder = Recorder()
    ema = EMAWeightAveraging(decay=0.8, update_every_n_steps=2, update_starting_at_step=3)
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_top_k=-1)
    module = Net()
    trainer(tmp_path, [recorder, ema, saver], max_epochs=2, enable_checkpointing=True).fit(module, loader(), loader(8))

    raw = recorder.after_step
    updated = [step for step in range(2 * BATCHES) if step >= 3 and step % 2 == 0]  # zero-based step indices
    assert updated == [4, 6, 8, 10, 12, 14]
    assert_same(module.state_dict(), hand_ema(raw, 0.8, updated))  # BatchNorm statistics averaged too

    # Validation after each epoch saw the average of that time; training went on from the raw weights.
    by_epoch = [hand_ema(raw, 0.8, [4, 6]), hand_ema(raw, 0.8, updated)]
    for seen, expected in zip(module.validation_weights, by_epoch, strict=True):
        assert_same({"net." + name: value for name, value in seen.items()}, expected)
    plain = Net()
    trainer(tmp_path, [], max_epochs=2).fit(plain, loader(), loader(8))
    assert_same(plain.state_dict(), raw[-1])

    saved = torch.load(tmp_path / "ckpts" / "epoch=1-step=16.ckpt", weights_only=True)
    assert_same(saved["state_dict"], hand_ema(raw, 0.8, updated))
    assert_same(saved["current_model_state"], raw[-1])
    assert int(saved["averaging_state"]["n_averaged"]) == len(updated)


def test_ema_resumes_exactly_from_a_checkpoint_of_the_first_epoch(tmp_path: Path) -> None:
    def ema() -> EMAWeightAveraging:
        return EMAWeightAveraging(decay=0.8, update_starting_at_epoch=0)  # by step, and at every epoch end

    uninterrupted = Net()
    trainer(tmp_path, [ema()], max_epochs=2).fit(uninterrupted, loader())
    first = Net()
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts")
    trainer(tmp_path, [ema(), saver], max_epochs=1, enable_checkpointing=True).fit(first, loader())
    resumed = Net()
    (saved,) = (tmp_path / "ckpts").iterdir()
    trainer(tmp_path, [ema()], max_epochs=2).fit(resumed, loader(), ckpt_path=saved)
    assert_same(resumed.state_dict(), uninterrupted.state_dict())


def test_should_update_decides_when_the_average_moves(tmp_path: Path) -> None:
    class EveryEpoch(WeightAveraging):  # an equal-weight average of the weights at each epoch's end
        def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
            return epoch_idx is not None

    recorder = Recorder()
    module = Net(batch_norm=False)
    trainer(tmp_path, [recorder, EveryEpoch(use_buffers=False)], max_epochs=3).fit(module, loader())
    ends = [recorder.after_step[(epoch + 1) * BATCHES - 1] for epoch in range(3)]
    assert_same(module.state_dict(), {name: mean([end[name] for end in ends]) for name in ends[0]})
    with pytest.raises(core.ConfigurationError, match=r"unknown option\(s\) \['decay'\]"):
        WeightAveraging(decay=0.5)


# StochasticWeightAveraging -------------------------------------------------------------------------------------------


def expected_swa_lrs(start_lr: float, swa_lr: float, epochs: int, strategy: Literal["cos", "linear"]) -> list[float]:
    """The rates SWALR gives an optimizer whose rate is ``start_lr`` when SWA begins, epoch by epoch."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=start_lr)
    optimizer.param_groups[0]["initial_lr"] = swa_lr
    scheduler = torch.optim.swa_utils.SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=2, anneal_strategy=strategy)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # nothing to do (no gradient); torch wants a step before the scheduler's
        scheduler.step()
    return rates


def test_swa_leaves_the_average_of_the_swa_epochs_and_swaps_the_scheduler(tmp_path: Path) -> None:
    recorder = Recorder()
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=3, annealing_epochs=2, annealing_strategy="linear")
    module = Net(batch_norm=False, scheduler=True)
    trainer(tmp_path, [recorder, swa], max_epochs=5).fit(module, loader())
    assert (swa.swa_start, swa.swa_end) == (2, 4)
    # Lightning's rule: the average takes in the weights at the start of epochs 2, 3 and 4 (0-based).
    averaged = recorder.epoch_start[2:5]
    assert_same(module.state_dict(), {name: mean([state[name] for state in averaged]) for name in averaged[0]})
    assert swa.n_averaged is not None and int(swa.n_averaged) == 3
    # StepLR halves the rate after epochs 0 and 1; then SWALR anneals linearly from 0.025 to 0.02.
    assert recorder.lrs[:2] == pytest.approx([0.1, 0.05])
    assert recorder.lrs[2:] == pytest.approx(expected_swa_lrs(0.025, 0.02, 3, "linear"))


def test_swa_recomputes_batch_norm_statistics_for_the_averaged_weights(tmp_path: Path) -> None:
    recorder = Recorder()
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=0.6)  # int(0.6 * 5) = epoch 3, index 2
    module = Net(batch_norm=True)
    run = trainer(tmp_path, [recorder, swa], max_epochs=5)
    run.fit(module, loader())
    averaged = {name: mean([state[name] for state in recorder.epoch_start[2:5]]) for name in recorder.epoch_start[0]}
    assert_same(params(module.state_dict()), params(averaged))  # the extra epoch changed no weight

    # The statistics one pass over the training data gives the averaged weights (a plain average over batches).
    reference = Net(batch_norm=True)
    reference.load_state_dict(averaged)
    norm = cast(nn.BatchNorm1d, reference.net[1])
    norm.reset_running_stats()
    norm.momentum = None
    with torch.no_grad():
        for inputs, _ in loader():
            reference.net(inputs)
    assert_same(module.state_dict(), reference.state_dict())
    # Lightning's extra epoch: one more epoch, one (empty) optimizer step; the flags and momentum are put back.
    assert (run.current_epoch, run.global_step, run.max_epochs) == (6, 5 * BATCHES + 1, 5)
    assert module.net[1].momentum == 0.1


def test_swa_resumes_exactly_from_the_middle_and_the_end_of_an_swa_epoch(tmp_path: Path) -> None:
    def swa() -> StochasticWeightAveraging:
        return StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=3)

    uninterrupted = Net(batch_norm=False, scheduler=True)
    trainer(tmp_path, [swa()], max_epochs=4).fit(uninterrupted, loader())

    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_top_k=-1)
    interrupted = Net(batch_norm=False, scheduler=True, fail_at_step=2 * BATCHES + 3)  # SWA began at epoch 1
    on_exception = OnExceptionCheckpoint(tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        trainer(tmp_path, [swa(), saver, on_exception], max_epochs=4, enable_checkpointing=True).fit(
            interrupted, loader()
        )
    for path in (tmp_path / "ckpts" / "epoch=1-step=16.ckpt", Path(on_exception.ckpt_path)):
        resumed = Net(batch_norm=False, scheduler=True)
        trainer(tmp_path, [swa()], max_epochs=4).fit(resumed, loader(), ckpt_path=path)
        assert_same(resumed.state_dict(), uninterrupted.state_dict())


def test_swa_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match="swa_epoch_start=0"):
        StochasticWeightAveraging(swa_lrs=0.1, swa_epoch_start=0)
    with pytest.raises(core.ConfigurationError, match="swa_lrs=-1"):
        StochasticWeightAveraging(swa_lrs=-1.0)
    with pytest.raises(core.ConfigurationError, match="annealing_strategy='step'"):
        StochasticWeightAveraging(swa_lrs=0.1, annealing_strategy="step")

    class StepScheduler(Net):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    with pytest.raises(core.ConfigurationError, match="steps every 'step'"):
        trainer(tmp_path, [StochasticWeightAveraging(swa_lrs=0.1)], max_epochs=2).fit(StepScheduler(), loader())
