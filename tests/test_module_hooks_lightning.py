"""LightningModule hooks on core.Module, with Lightning 2.6's semantics (core/module.py and core/hooks.py there):
batch transfer (Module or DataModule), overridable optimizer_step / optimizer_zero_grad / lr_scheduler_step /
backward, configure_gradient_clipping, configure_callbacks, the eval-mode hooks, logger / loggers and
example_input_array. One process on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback, EarlyStopping, LambdaCallback, ModelCheckpoint
from core.loggers import CSVLogger


def loader(seed: int = 0, samples: int = 32) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(samples, 3, generator=generator),
                                    torch.randn(samples, 1, generator=generator)), batch_size=8)


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


class Plain(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = net()
        self.calls: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.calls.append(f"val:{dataloader_idx}:{self.training}")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(tmp_path: Path, module: core.Module, **flags: Any) -> core.Trainer:
    settings = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                "enable_model_summary": False, "num_sanity_val_steps": 0, "max_epochs": 1, **flags}
    trainer = core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, **settings)
    trainer.fit(module, train_dataloaders=loader(), val_dataloaders=[loader(1, 8), loader(2, 8)])
    return trainer


def test_the_batch_goes_through_the_transfer_hooks_in_training_and_evaluation(tmp_path: Path) -> None:
    class Transfers(Plain):
        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            self.calls.append(f"before:{dataloader_idx}")
            return [batch[0] * 3, batch[1]]

        def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
            self.calls.append(f"transfer:{device.type}")
            return [tensor.to(device) for tensor in batch]

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            return [batch[0] / 3, batch[1]]

    module = Transfers()
    fit(tmp_path, module)
    assert module.calls[:2] == ["before:0", "transfer:cpu"]
    assert module.calls.count("before:0") == 4 + 1 and module.calls.count("before:1") == 1  # 4 train, 1 + 1 val
    assert module.calls[-3:] == ["before:1", "transfer:cpu", "val:1:False"]
    reference = Plain()
    fit(tmp_path, reference)
    for mine, theirs in zip(module.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)  # x * 3 / 3: the same training


def test_a_datamodules_transfer_hook_wins_over_the_modules(tmp_path: Path) -> None:
    class Data(core.DataModule):
        def train_dataloader(self) -> DataLoader[Any]:
            return loader()

        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            return [batch[0], batch[1] * 0]  # targets zeroed: the loss falls to the model predicting 0

    class Ignored(Plain):
        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            raise AssertionError("the DataModule's hook must be used")

    module = Ignored()
    losses: list[float] = []
    recorder = LambdaCallback(on_train_batch_end=lambda t, m, out, batch, i: losses.append(float(batch[1].abs().sum())))
    core.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                 enable_model_summary=False, max_epochs=1, callbacks=[recorder]).fit(module, datamodule=Data())
    assert losses == [0.0] * 4


def test_an_overridden_optimizer_step_gets_a_closure_that_runs_the_step_and_the_backward(tmp_path: Path) -> None:
    class SkipsOdd(Plain):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            self.calls.append(f"step:{epoch}:{batch_idx}")
            if batch_idx % 2 == 0:
                optimizer.step(closure=optimizer_closure)  # odd batches: no forward, no backward, no step

        def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
            self.calls.append("zero")
            optimizer.zero_grad(set_to_none=False)

        def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            self.calls.append("backward")
            super().backward(loss, *args, **kwargs)

    module = SkipsOdd()
    trainer = fit(tmp_path, module, limit_val_batches=0)
    # The closure zeroes the gradients, then runs training_step and the backward (as Lightning's closure does): a
    # step that never calls it zeroes nothing either.
    assert module.calls == ["step:0:0", "zero", "backward", "step:0:1", "step:0:2", "zero", "backward", "step:0:3"]
    assert trainer.global_step == 4
    expected = net()
    optimizer = torch.optim.SGD(expected.parameters(), lr=0.1)
    for index, (inputs, targets) in enumerate(loader()):
        if index % 2 == 0:
            optimizer.zero_grad()
            F.mse_loss(expected(inputs), targets).backward()
            optimizer.step()
    for mine, theirs in zip(module.net.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_lbfgs_evaluates_the_closure_several_times(tmp_path: Path) -> None:
    class Quasi(Plain):
        evaluations = 0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.evaluations += 1
            return super().training_step(batch, batch_idx)

        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step(closure=optimizer_closure)

        def configure_optimizers(self) -> Any:
            return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=5)

    module = Quasi()
    fit(tmp_path, module, limit_val_batches=0)
    expected = net()
    optimizer = torch.optim.LBFGS(expected.parameters(), lr=0.5, max_iter=5)
    evaluations = 0
    for inputs, targets in loader():

        def closure(inputs: torch.Tensor = inputs, targets: torch.Tensor = targets) -> torch.Tensor:
            nonlocal evaluations
            evaluations += 1
            optimizer.zero_grad()
            loss = F.mse_loss(expected(inputs), targets)
            loss.backward()
            return loss

        optimizer.step(closure)
    assert module.evaluations == evaluations > 4  # LBFGS re-evaluated; each evaluation started from zero gradients
    for mine, theirs in zip(module.net.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_configure_gradient_clipping_gets_the_trainers_flags_at_every_step(tmp_path: Path) -> None:
    class Clips(Plain):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            self.calls.append(f"clip:{gradient_clip_val}:{gradient_clip_algorithm}")
            self.clip_gradients(optimizer)  # the Trainer's value and algorithm (another value would be refused)

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            self.calls.append("before_step")

    module = Clips()
    fit(tmp_path, module, limit_val_batches=0, gradient_clip_val=0.5)
    assert module.calls == ["before_step", "clip:0.5:norm"] * 4
    unset = Clips()
    fit(tmp_path, unset, limit_val_batches=0)
    assert unset.calls == ["before_step", "clip:None:norm"] * 4  # called without gradient_clip_val as well


def test_lr_scheduler_step_can_be_overridden(tmp_path: Path) -> None:
    class Scheduled(Plain):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            self.calls.append(f"scheduler:{type(scheduler).__name__}:{metric}")
            scheduler.step()

    module = Scheduled()
    trainer = fit(tmp_path, module, limit_val_batches=0, max_epochs=3)
    assert module.calls == ["scheduler:StepLR:None"] * 3
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)


def test_configure_callbacks_replaces_trainer_callbacks_of_the_same_class(tmp_path: Path) -> None:
    mine = EarlyStopping(monitor="val_loss", patience=7)
    theirs = EarlyStopping(monitor="val_loss", patience=1)
    extra = LambdaCallback(on_fit_start=lambda trainer, module: None)

    class WithCallbacks(Plain):
        def configure_callbacks(self) -> Any:
            return [mine, extra]

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]), add_dataloader_idx=False)

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    trainer = fit(tmp_path, WithCallbacks(), callbacks=[theirs, checkpoint], enable_checkpointing=True)
    assert theirs not in trainer.callbacks and mine in trainer.callbacks and extra in trainer.callbacks
    assert trainer.callbacks[-1] is checkpoint  # checkpoints stay last

    class Broken(Plain):
        def configure_callbacks(self) -> Any:
            return ["not a callback"]

    with pytest.raises(core.ConfigurationError, match=r"Broken.configure_callbacks\(\) returned 'not a callback'"):
        fit(tmp_path, Broken())


def test_overridden_eval_mode_hooks_replace_the_default_mode_switch(tmp_path: Path) -> None:
    class KeepsDropoutOn(Plain):
        def on_validation_model_eval(self) -> None:
            self.calls.append("model_eval")
            self.train()  # Monte-Carlo dropout style: stay in training mode

        def on_validation_model_train(self) -> None:
            self.calls.append("model_train")
            self.train()

    module = KeepsDropoutOn()
    fit(tmp_path, module)
    assert module.calls == ["model_eval", "val:0:True", "val:1:True", "model_train"]
    default = Plain()
    fit(tmp_path, default)
    assert default.calls == ["val:0:False", "val:1:False"] and default.training


def test_logger_loggers_and_example_input_array(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    class Reads(Plain):
        def on_fit_start(self) -> None:
            seen["logger"], seen["loggers"] = self.logger, self.loggers

    module = Reads()
    assert module.logger is None and module.loggers == []  # outside a run
    csv = CSVLogger(tmp_path)
    fit(tmp_path, module, logger=csv)
    assert seen == {"logger": csv, "loggers": [csv]}
    module.example_input_array = torch.zeros(2, 3)
    assert module.example_input_array.shape == (2, 3)
    assert isinstance(Callback(), Callback)
