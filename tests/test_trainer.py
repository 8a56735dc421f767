"""The Trainer as a specification: the same training as a hand-written Lite loop, bit for bit, and a resumed
run that cannot be told from an uninterrupted one (weights and every logged value)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import ModelCheckpoint
from core.loggers import Logger


@pytest.fixture(autouse=True)
def _fresh_seed_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    yield


class Recorder(Logger):
    """A logger that keeps what it is sent, in order."""

    def __init__(self) -> None:
        super().__init__("unused")
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: Any, step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any) -> None:
        pass


def dataset(size: int = 96, seed: int = 123) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(size, 10, generator=generator), torch.randint(0, 4, (size,), generator=generator))


def network(dropout: float = 0.0) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(32, 4)
    )


class Classifier(core.Module):
    def __init__(self, dropout: float = 0.0, lr: float = 0.01, scheduler: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = network(dropout)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.cross_entropy(self(inputs), targets)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self(inputs), targets))

    def on_train_epoch_end(self) -> None:
        self.log("weight_norm", cast(torch.nn.Linear, self.net[0]).weight.norm())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        if not self.hparams.scheduler:
            return optimizer
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


# -------------------------------------------------------------------------------------------------
# Trainer vs a hand-written Lite loop
# -------------------------------------------------------------------------------------------------


def lite_loop(lite: core.Lite, steps: int, accumulate: int, clip: float | None) -> torch.nn.Module:
    """The loop the Trainer must reproduce: zero_grad at each window, backward, clip, step."""
    core.seed_everything(0, verbose=False)
    model = network()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = lite.setup(model, optimizer)
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=16, shuffle=True))
    taken = 0
    while taken < steps:
        for index, (inputs, targets) in enumerate(loader):
            last_of_window = (index + 1) % accumulate == 0 or index + 1 == len(loader)
            if index % accumulate == 0:
                optimizer.zero_grad()
            with lite.no_backward_sync(model, enabled=not last_of_window):
                loss = F.cross_entropy(model(inputs), targets)
                lite.backward(loss / accumulate if accumulate > 1 else loss)
            if last_of_window:
                if clip is not None:
                    lite.clip_gradients(model, optimizer, max_norm=clip, error_if_nonfinite=False)
                optimizer.step()
                taken += 1
                if taken == steps:
                    break
    return model.module


@pytest.mark.parametrize(("accumulate", "clip"), [(1, None), (3, 0.05)])
def test_trainer_and_a_lite_loop_end_with_bitwise_identical_weights(accumulate: int, clip: float | None) -> None:
    steps = 14  # not a whole number of epochs: the Trainer stops in the middle of one
    expected = core.Lite(accelerator="cpu", devices=1).launch(lite_loop, steps, accumulate, clip)
    assert expected is not None  # one process: rank 0's result

    core.seed_everything(0, verbose=False)
    module = Classifier()
    trainer = core.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, accumulate_grad_batches=accumulate, gradient_clip_val=clip,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
    )
    trainer.fit(module, DataLoader(dataset(), batch_size=16, shuffle=True))

    assert trainer.global_step == steps
    untrained = network()
    trained = zip(expected.named_parameters(), module.net.parameters(), untrained.parameters(), strict=True)
    for (name, want), got, start in trained:
        assert torch.equal(got, want), f"parameter {name} differs from the Lite loop's"
        assert not torch.equal(got, start), f"{name} did not train: the comparison would prove nothing"


def test_the_parity_check_notices_one_step_more() -> None:
    expected = core.Lite(accelerator="cpu", devices=1).launch(lite_loop, 14, 1, None)
    assert expected is not None
    core.seed_everything(0, verbose=False)
    module = Classifier()
    trainer = core.Trainer(accelerator="cpu", max_steps=15, logger=False, enable_checkpointing=False,
                           enable_progress_bar=False)
    trainer.fit(module, DataLoader(dataset(), batch_size=16, shuffle=True))
    assert not all(torch.equal(a, b) for a, b in zip(expected.parameters(), module.net.parameters(), strict=True))


# -------------------------------------------------------------------------------------------------
# Resuming
# -------------------------------------------------------------------------------------------------


def fit(root: Path, max_epochs: int, ckpt_path: str | None = None, **flags: Any) -> tuple[Classifier, Recorder]:
    core.seed_everything(7, verbose=False)
    module = Classifier(dropout=0.2, scheduler=True)
    recorder = Recorder()
    trainer = core.Trainer(
        accelerator="cpu", max_epochs=max_epochs, default_root_dir=root, logger=recorder, log_every_n_steps=2,
        enable_progress_bar=False, **flags,
    )
    # Shuffled by the global generator, with dropout: any generator not restored would show.
    trainer.fit(module, DataLoader(dataset(), batch_size=16, shuffle=True), DataLoader(dataset(40, 5), batch_size=16),
                ckpt_path=ckpt_path)
    return module, recorder


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, left), right in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(left, right), f"{name} differs"


def test_fit_two_epochs_then_resume_to_four_equals_four_uninterrupted(tmp_path: Path) -> None:
    full, full_log = fit(tmp_path / "full", 4)
    _, first_log = fit(tmp_path / "resumed", 2)
    resumed, second_log = fit(tmp_path / "resumed", 4, ckpt_path="last")

    assert_same_weights(full, resumed)
    assert first_log.rows + second_log.rows == full_log.rows
    assert second_log.rows[0][1]["epoch"] == 2, "the resumed run started again from the beginning"
    assert {"train_loss_step", "train_loss_epoch", "val_loss", "weight_norm"} <= set().union(
        *(metrics for _, metrics in full_log.rows))


def test_resume_from_a_checkpoint_in_the_middle_of_an_epoch(tmp_path: Path) -> None:
    every_5_steps: dict[str, Any] = {"callbacks": [ModelCheckpoint(every_n_train_steps=5, save_top_k=-1)]}
    full, full_log = fit(tmp_path / "full", 3, **every_5_steps)
    middle = tmp_path / "full" / "checkpoints" / "epoch=1-step=10.ckpt"  # 6 batches per epoch: batch 4 of epoch 1
    assert middle.exists(), sorted(path.name for path in middle.parent.iterdir())

    resumed, resumed_log = fit(tmp_path / "resumed", 3, ckpt_path=str(middle), **every_5_steps)

    assert_same_weights(full, resumed)
    assert resumed_log.rows == [(step, metrics) for step, metrics in full_log.rows if step > 10]


def test_without_restoring_the_generators_the_resumed_run_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume test is not vacuous: shuffling and dropout after the checkpoint depend on the generators."""
    full, _ = fit(tmp_path / "full", 3)
    fit(tmp_path / "resumed", 2)
    monkeypatch.setattr("core.trainer._loops.restore_rng", lambda state: None)
    resumed, _ = fit(tmp_path / "resumed", 3, ckpt_path="last")
    pairs = zip(full.state_dict().values(), resumed.state_dict().values(), strict=True)
    assert not all(torch.equal(a, b) for a, b in pairs)


def test_last_with_no_checkpoint_warns_and_starts_from_the_beginning(tmp_path: Path) -> None:
    with pytest.warns(core.CoreWarning, match="there is no last checkpoint.*No checkpoint will be loaded"):
        _, recorder = fit(tmp_path, 1, ckpt_path="last")
    assert recorder.rows[0][1]["epoch"] == 0


def test_validate_and_test_return_one_dict_per_loader(tmp_path: Path) -> None:
    module, _ = fit(tmp_path, 1)
    trainer = core.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    loaders = [DataLoader(dataset(40, 5), batch_size=16), DataLoader(dataset(24, 6), batch_size=8)]
    results = trainer.validate(module, loaders)
    assert [sorted(result) for result in results] == [["val_loss/dataloader_idx_0"], ["val_loss/dataloader_idx_1"]]
    single = trainer.validate(module, loaders[0])
    assert single[0]["val_loss"] == pytest.approx(results[0]["val_loss/dataloader_idx_0"], abs=0)
