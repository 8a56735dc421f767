"""The one list of differences from Lightning (docs/migrating-from-lightning.md, "Differences from Lightning") stays
true and stays one: every test it names exists (each shows core's side of its item), the defaults and signatures it
states are checked here, and no other page keeps a list of its own."""

from __future__ import annotations

import inspect
import os
import random
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import EarlyStopping
from core.loggers import Logger

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migrating-from-lightning.md"
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def differences() -> str:
    return PAGE.read_text().split("\n## Differences from Lightning\n", 1)[1].split("\n## ", 1)[0]


def test_every_test_the_list_names_exists() -> None:
    named = TEST_REFERENCE.findall(differences())
    assert len(named) >= 10, named
    missing = [f"{path}::{name}" for path, name in named
               if not (ROOT / path).exists() or not re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M)]
    assert not missing, f"the list of differences names tests that do not exist: {missing}"


def test_no_other_page_keeps_its_own_list() -> None:
    # A heading may stay (the Trainer's and Lite's pages have one), but its section only links to the list.
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page == PAGE:
            continue
        for section in re.split(r"\n(?=## )", page.read_text()):
            if section.startswith("## Differences from Lightning"):
                assert "migrating-from-lightning.md#" in section, page.name
                assert not re.search(r"^- ", section, re.M), f"{page.name} lists differences of its own"


def test_early_stopping_checks_once_per_epoch_by_default() -> None:
    assert EarlyStopping(monitor="loss").check_on_train_epoch_end is True


@pytest.mark.parametrize("interval", ["00:00:10:00", timedelta(minutes=10)])
def test_a_time_based_val_check_interval_is_refused(interval: Any) -> None:
    with pytest.raises(core.ConfigurationError, match="val_check_interval"):
        core.Trainer(accelerator="cpu", val_check_interval=interval)


def test_lite_setup_takes_no_scheduler_and_load_refuses_pickles_by_default() -> None:
    assert "scheduler" not in inspect.signature(core.Lite.setup).parameters
    assert inspect.signature(core.Lite.load).parameters["weights_only"].default is True


# -- the items below had no test that shows core's side: each runs a tiny fit in this process ----------------------


class _TwoOptimizers(core.Module):
    """Two layers, each with its own optimizer; validation logs a value on every step."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 1)
        self.training_steps = 0
        self.backward_calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:  # no optimizer_idx, as in Lightning 2.x
        self.training_steps += 1
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.second(self.first(inputs)), targets)
        self.log("train_loss", loss)
        return loss

    def on_after_backward(self) -> None:
        self.backward_calls += 1

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.second(self.first(inputs)), targets), on_step=True)

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.first.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)]


def _loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(16, 4, generator=generator)
    return DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=4)


def _fit(model: core.Module, logger: Logger | bool = False, **flags: Any) -> core.Trainer:
    trainer = core.Trainer(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False,
                           enable_model_summary=False, enable_checkpointing=False, logger=logger, **flags)
    trainer.fit(model, _loader(), _loader())
    return trainer


def test_one_training_step_and_one_backward_then_every_optimizer_steps() -> None:
    model = _TwoOptimizers()
    before = [layer.weight.detach().clone() for layer in (model.first, model.second)]
    trainer = _fit(model, limit_train_batches=1, limit_val_batches=0)
    assert (model.training_steps, model.backward_calls) == (1, 1)
    assert len(trainer.optimizers) == 2
    after = [layer.weight.detach() for layer in (model.first, model.second)]
    assert all(not torch.equal(old, new) for old, new in zip(before, after, strict=True)), "an optimizer did not step"


def test_seed_everything_sets_cores_variables_for_spawned_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.setenv(name, "")  # so that the test's end restores this process's environment as it was
        monkeypatch.delenv(name)
    python_state = random.getstate()
    with torch.random.fork_rng():
        core.seed_everything(123, workers=True)
    random.setstate(python_state)
    assert (os.environ["CORE_GLOBAL_SEED"], os.environ["CORE_SEED_WORKERS"]) == ("123", "1")
