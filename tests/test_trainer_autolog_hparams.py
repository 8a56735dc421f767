"""``Trainer(enable_autolog_hparams=...)``, as Lightning's: whether a run sends the hyperparameters of the Module and
the DataModule (``save_hyperparameters``) to its loggers when it starts. The flag is one declaration in
``core/trainer/_flags.py``; ``core.lightning``'s Trainer and its ``PL_TRAINER_*`` variables take it from there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
import core.lightning
from core.loggers import Logger
from core.trainer import TrainerConfig


class Recorder(Logger):
    def __init__(self) -> None:
        super().__init__("unused")
        self.hyperparameters: list[dict[str, Any]] = []

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any = None) -> None:
        self.hyperparameters.append(dict(params))


class Regressor(core.Module):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _fit(trainer: core.Trainer) -> None:
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    trainer.fit(Regressor(), loader)


def _trainer(root: Path, cls: type[core.Trainer] = core.Trainer, **flags: Any) -> core.Trainer:
    return cls(accelerator="cpu", devices=1, default_root_dir=root, max_steps=1, enable_progress_bar=False,
               enable_checkpointing=False, enable_model_summary=False, **flags)


@pytest.mark.parametrize(("flags", "expected"), [
    ({}, [{"lr": 0.05}]), ({"enable_autolog_hparams": True}, [{"lr": 0.05}]), ({"enable_autolog_hparams": False}, []),
])
def test_the_hyperparameters_reach_the_loggers_unless_the_flag_is_off(
    tmp_path: Path, flags: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    recorder = Recorder()
    trainer = _trainer(tmp_path, logger=recorder, **flags)
    _fit(trainer)
    assert recorder.hyperparameters == expected
    assert trainer.enable_autolog_hparams is trainer.config.enable_autolog_hparams is bool(expected)


def test_lightnings_trainer_takes_the_flag_from_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lightning's default logger writes hparams.yaml into the run's directory only when the flag is on.
    monkeypatch.setenv("PL_TRAINER_ENABLE_AUTOLOG_HPARAMS", "0")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "True")
    off = _trainer(tmp_path / "off", core.lightning.Trainer)
    _fit(off)
    assert off.enable_autolog_hparams is False
    assert not list((tmp_path / "off").rglob("hparams.yaml"))
    monkeypatch.delenv("PL_TRAINER_ENABLE_AUTOLOG_HPARAMS")
    on = _trainer(tmp_path / "on", core.lightning.Trainer)
    _fit(on)
    assert [path.read_text() for path in (tmp_path / "on").rglob("hparams.yaml")] == ["lr: 0.05\n"]


def test_a_value_that_is_not_a_bool_is_read_as_one() -> None:
    # As Lightning (a plain attribute read with `if`): the record holds a bool, so `trainer.config` compares cleanly.
    assert TrainerConfig.from_flags(enable_autolog_hparams=0).enable_autolog_hparams is False


class Plain(Regressor):
    def __init__(self, logger: bool | None = None) -> None:  # None: no save_hyperparameters at all
        core.Module.__init__(self)
        if logger is not None:
            self.save_hyperparameters(logger=logger)
        self.layer = torch.nn.Linear(2, 1)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Empty(Plain):
    def __init__(self) -> None:  # save_hyperparameters() with no argument to save
        core.Module.__init__(self)
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 1)


class Data(core.DataModule):
    def __init__(self, logger: bool = True, size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters(logger=logger)

    def train_dataloader(self) -> Any:
        return DataLoader(TensorDataset(torch.randn(self.hparams.size, 2), torch.randn(self.hparams.size, 1)),
                          batch_size=4)


@pytest.mark.parametrize(("module", "datamodule", "expected"), [
    (Plain(), None, []),  # never called save_hyperparameters: nothing to log (Lightning's _log_hyperparams is False)
    (Empty(), None, [{}]),  # called it with nothing to save: the loggers are called, with no hyperparameters
    (Plain(logger=True), None, [{"logger": True}]),
    (Plain(logger=False), None, []),
    (Plain(logger=False), Data(), [{"logger": True, "size": 8}]),  # the DataModule's alone
    (Plain(), Data(), [{"logger": True, "size": 8}]),
    (Plain(logger=False), Data(logger=False), []),
    (Regressor(), Data(), [{"lr": 0.05, "logger": True, "size": 8}]),
])
def test_the_loggers_get_the_hyperparameters_of_whichever_side_saved_them(
    tmp_path: Path, module: core.Module, datamodule: core.DataModule | None, expected: list[dict[str, Any]]
) -> None:
    # Lightning's _log_hyperparams: log_hyperparams(hparams_initial) when the Module or the DataModule called
    # save_hyperparameters() with logger=True (the default), empty ones included; nothing when neither did.
    recorder = Recorder()
    trainer = _trainer(tmp_path, logger=recorder)
    if datamodule is None:
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4))
    else:
        trainer.fit(module, datamodule=datamodule)
    assert recorder.hyperparameters == expected


class Logging(Plain):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss)  # the logger writes, so its run directory exists
        return loss


@pytest.mark.parametrize(("logger", "module", "expected"), [
    # Lightning's TensorBoardLogger writes what it holds when it saves (after a successful run), once its directory
    # exists; its CSVLogger writes the file only when hyperparameters are logged.
    ("TensorBoardLogger", Logging, ["{}\n"]),
    ("CSVLogger", Logging, []),
    ("CSVLogger", Empty, ["{}\n"]),
])
def test_the_hparams_file_appears_as_with_lightnings_loggers(
    tmp_path: Path, logger: str, module: type[core.Module], expected: list[str]
) -> None:
    pytest.importorskip("yaml")
    if logger == "TensorBoardLogger":
        pytest.importorskip("tensorboard")
    chosen = getattr(core.lightning.pytorch.loggers, logger)(tmp_path)
    trainer = _trainer(tmp_path, core.lightning.Trainer, logger=chosen, log_every_n_steps=1)
    trainer.fit(module(), DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4))
    assert [path.read_text() for path in tmp_path.rglob("hparams.yaml")] == expected
