"""The one list of differences from Lightning (docs/migrating-from-lightning.md, "Differences from Lightning") stays
true and stays one: every item names a test that shows core's side of it, every test it names exists, the tests no
other file had are here, and no other page keeps a list of its own."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import NEEDS_DDP, job_environment
from torch.utils.data import DataLoader, TensorDataset

import core
import core.hookspecs
from core.callbacks import Callback, ModelCheckpoint
from core.loggers import Logger
from core.profilers import PyTorchProfiler, SimpleProfiler

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migrating-from-lightning.md"
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def differences() -> str:
    return PAGE.read_text().split("\n## Differences from Lightning\n", 1)[1].split("\n## ", 1)[0]


def items() -> list[str]:
    """Each "- " bullet of the list with its continuation lines (indented); headings and paragraphs are no items."""
    return re.findall(r"^- .*(?:\n  .*)*", differences(), re.M)


def test_every_test_the_list_names_exists() -> None:
    without = [item.split("\n", 1)[0] for item in items() if not TEST_REFERENCE.search(item)]
    assert len(items()) >= 20 and not without, f"items of the list that name no test: {without}"
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


class _Recording(core.Module):
    """Records when fit calls its data, model and optimizer hooks and what configure_optimizers knows."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.calls: list[str] = []
        self.known_in_configure_optimizers: tuple[int | float, int | float] | None = None

    def configure_model(self) -> None:
        self.calls.append("configure_model")

    def train_dataloader(self) -> DataLoader[Any]:
        self.calls.append("train_dataloader")
        return _loader()

    def val_dataloader(self) -> DataLoader[Any]:
        self.calls.append("val_dataloader")
        return _loader()

    def configure_optimizers(self) -> Any:
        self.calls.append("configure_optimizers")
        trainer: Any = self.trainer  # core.Trainer (core.module.TrainerView types no estimated_stepping_batches)
        self.known_in_configure_optimizers = (trainer.num_training_batches, trainer.estimated_stepping_batches)
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_fit_start(self) -> None:
        self.calls.append("on_fit_start")

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


def test_fit_asks_for_the_loaders_before_configure_optimizers() -> None:
    model = _Recording()
    core.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, enable_model_summary=False,
                 enable_checkpointing=False, logger=False).fit(model)
    assert model.calls == ["configure_model", "val_dataloader", "train_dataloader", "configure_optimizers",
                           "on_fit_start"]
    assert model.known_in_configure_optimizers == (4, 8)  # 16 samples in batches of 4, two epochs


class _Hooked(_Recording):
    """Overrides module hooks that Lightning's profilers time as ``[LightningModule]<class>.<hook>`` actions."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_before_backward(self, loss: torch.Tensor) -> None:
        pass

    def on_train_epoch_end(self) -> None:
        pass


class _Timed(Callback):
    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


def test_the_profilers_time_no_module_hook_but_optimizer_step_and_refuse_what_they_do_not_do() -> None:
    profiler = SimpleProfiler()
    model = _Hooked()
    core.Trainer(accelerator="cpu", devices=1, max_epochs=1, limit_val_batches=0, profiler=profiler,
                 enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, logger=False,
                 callbacks=[_Timed()]).fit(model)
    actions = set(profiler.recorded_durations)
    assert "[Callback]_Timed.on_train_batch_end" in actions  # callbacks' hooks are actions
    assert {action for action in actions if action.startswith("[LightningModule]")} == {
        "[LightningModule]_Hooked.optimizer_step"}
    with pytest.raises(core.ConfigurationError, match=r"PyTorchProfiler\(record_module_names=True\) is not supported"):
        PyTorchProfiler(record_module_names=True)
    with pytest.raises(core.ConfigurationError, match=r"PyTorchProfiler\(emit_nvtx=True\) is not supported"):
        PyTorchProfiler(emit_nvtx=True)


class _StopAtSetup(Exception):
    pass


class _StopsAtSetup(Callback):
    def setup(self, trainer: Any, module: Any, stage: str) -> None:  # a profiled action: the report is written
        raise _StopAtSetup


def test_a_profilers_file_per_rank_carries_the_global_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Global rank 3 of 4, local rank 1 (the second process of the second node). Only this process runs, so the run
    # stops at its first profiled action, before anything would talk to the other ranks.
    for name, value in (("world_size", 4), ("global_rank", 3), ("local_rank", 1), ("node_rank", 1)):
        monkeypatch.setattr(core.Lite, name, property(lambda self, value=value: value))  # type: ignore[misc]
    trainer = core.Trainer(accelerator="cpu", devices=1, profiler=SimpleProfiler(dirpath=tmp_path, filename="perf"),
                           enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                           logger=False, callbacks=[_StopsAtSetup()])
    with pytest.raises(_StopAtSetup):
        trainer.fit(_Recording())
    assert [path.name for path in tmp_path.iterdir()] == ["fit-perf-3.txt"]  # Lightning: fit-perf-1.txt


class _StartsAt(Callback):
    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.step = trainer.global_step


@pytest.mark.parametrize("save_last", [None, True])
def test_ckpt_path_last_is_the_newest_checkpoint_with_or_without_save_last(tmp_path: Path, save_last: bool | None
                                                                           ) -> None:
    def fit(max_epochs: int, ckpt_path: str | None = None) -> _StartsAt:
        started = _StartsAt()
        core.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, limit_val_batches=0, logger=False,
                     default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[ModelCheckpoint(save_top_k=-1, save_last=save_last), started],
                     ).fit(_Recording(), ckpt_path=ckpt_path)
        return started

    fit(2)
    directory = tmp_path / "checkpoints"
    written = sorted(path.name for path in directory.iterdir())
    assert written == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", *(["last.ckpt"] if save_last else [])]
    newest = time.time_ns() + 10**9  # the first epoch's file is made the newest: ckpt_path="last" resumes from it
    os.utime(directory / "epoch=0-step=4.ckpt", ns=(newest, newest))
    assert fit(3, ckpt_path="last").step == 4  # Lightning: last.ckpt (step 8), or with no last*.ckpt nothing (0)


SPAWNED = """
import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
import core.hookspecs


class RankPredictor(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def predict_step(self, batch, batch_idx):
        return torch.full((len(batch[0]),), float(self.global_rank))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    trainer = core.Trainer(accelerator="cpu", strategy="ddp_spawn", devices=2, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(RankPredictor(), data)
    try:
        trainer.save_checkpoint(sys.argv[1])
        refused = None
    except core.CoreError as error:
        refused = str(error)
    predictions = trainer.predict(RankPredictor(), data)
    print(json.dumps({"refused": refused, "predictions": [batch.tolist() for batch in predictions]}))
"""


@NEEDS_DDP
@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_after_a_ddp_spawn_fit_save_checkpoint_is_refused_and_predict_returns_rank_zeros_predictions(
    tmp_path: Path
) -> None:
    script, checkpoint = tmp_path / "spawned.py", tmp_path / "after.ckpt"
    script.write_text(SPAWNED)
    finished = subprocess.run([sys.executable, str(script), str(checkpoint)], capture_output=True, text=True,
                              timeout=200, cwd=tmp_path, env=job_environment())
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-4000:]
    reported = json.loads(finished.stdout.strip().splitlines()[-1])
    assert reported["refused"] is not None and "save_checkpoint() after a ddp_spawn fit" in reported["refused"]
    assert not checkpoint.exists()
    # 16 samples, 8 per process in batches of 4: rank 0's two batches, none of rank 1's (Lightning refuses
    # return_predictions=True with a spawning strategy)
    assert reported["predictions"] == [[0.0] * 4, [0.0] * 4]


def test_lite_clips_with_torch_unless_the_strategy_clips_the_gradients_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fabric asks its strategy (clip_gradients_norm / _value); core asks strategy_clip_gradients, and a strategy that
    # does not implement it leaves the clip to torch.nn.utils over the module's parameters.
    from core.toolkit.strategies import SingleDeviceStrategy

    clipped: list[list[int]] = []
    clip_grad_norm = torch.nn.utils.clip_grad_norm_

    def recording(parameters: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        parameters = list(parameters)
        clipped.append([id(parameter) for parameter in parameters])
        return clip_grad_norm(parameters, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)

    def run(lite: core.Lite) -> tuple[list[int], Any, Any]:
        model = torch.nn.Linear(4, 1)
        set_up, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        lite.backward(set_up(torch.ones(2, 4)).sum())
        norm = lite.clip_gradients(set_up, optimizer, max_norm=1.0)
        by_value = lite.clip_gradients(set_up, optimizer, clip_val=1)
        return [id(parameter) for parameter in model.parameters()], norm, by_value

    parameters, norm, by_value = core.Lite(accelerator="cpu", devices=1).launch(run)
    assert clipped == [parameters] and isinstance(norm, torch.Tensor) and by_value is None

    class ClipsItself(SingleDeviceStrategy):
        asked: list[dict[str, Any]] = []

        @core.hookimpl
        def strategy_clip_gradients(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                                    max_norm: float | None, clip_val: float | None) -> torch.Tensor | bool:
            self.asked.append({"module": type(module).__name__, "optimizer": type(optimizer).__name__,
                               "max_norm": max_norm, "clip_val": clip_val})
            return torch.tensor(7.0) if max_norm is not None else True

    clipped.clear()
    _, norm, by_value = core.Lite(accelerator="cpu", devices=1, strategy=ClipsItself()).launch(run)
    assert clipped == [] and float(norm) == 7.0 and by_value is None  # the strategy's answer, torch not called
    assert ClipsItself.asked == [  # the module under the Lite wrapper, the optimizer under Lite's
        {"module": "Linear", "optimizer": "SGD", "max_norm": 1.0, "clip_val": None},
        {"module": "Linear", "optimizer": "SGD", "max_norm": None, "clip_val": 1},
    ]
