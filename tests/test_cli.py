"""core.cli's CoreCLI and core.lightning's LightningCLI, run in-process with ``args=`` as a script would run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import core
from core.cli import CoreCLI, SaveConfigCallback, SaveConfigError
from core.lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

_QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
_SHORT = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=2",
          "--trainer.limit_test_batches=2", "--trainer.limit_predict_batches=2", *_QUIET]


class Regressor(core.Module):
    """A module with __init__ arguments, so the CLI has --model.* to set."""

    def __init__(self, hidden: int = 4, learning_rate: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = (self(batch) - batch.sum(1, keepdim=True)).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_loss", (self(batch) - batch.sum(1, keepdim=True)).pow(2).mean())

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("test_loss", (self(batch) - batch.sum(1, keepdim=True)).pow(2).mean())

    def predict_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self(batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


class RecordingCLI(CoreCLI):
    """Records the before_/after_ hooks the CLI calls around each subcommand."""

    calls: list[str]

    def before_instantiate_classes(self) -> None:
        self.calls = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("before_", "after_")) and name.split("_", 1)[1] in ("fit", "validate", "test", "predict"):
            return lambda: self.calls.append(name)
        raise AttributeError(name)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_print_config_then_config_file_repeats_the_same_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    words = ["fit", "--seed_everything=7", "--model.hidden=3", "--model.learning_rate=0.05", *_SHORT]
    first = CoreCLI(Regressor, BoringDataModule, args=[*words, "--trainer.default_root_dir=a"])
    with pytest.raises(SystemExit) as excinfo:
        CoreCLI(Regressor, BoringDataModule, args=[*words, "--trainer.default_root_dir=b", "--print_config"])
    assert excinfo.value.code == 0
    printed = capsys.readouterr().out
    (tmp_path / "printed.yaml").write_text(printed)
    resolved = yaml.safe_load(printed)
    assert resolved["model"] == {"hidden": 3, "learning_rate": 0.05}
    assert resolved["trainer"]["max_epochs"] == 1 and resolved["seed_everything"] == 7

    again = CoreCLI(Regressor, BoringDataModule, args=["fit", "--config", "printed.yaml"])
    assert again.model.net[0].out_features == 3
    for mine, theirs in zip(first.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)  # same seed, same data, same steps: the same weights
    saved_first = yaml.safe_load(Path(first.trainer.log_dir, "config.yaml").read_text())
    saved_again = yaml.safe_load(Path(again.trainer.log_dir, "config.yaml").read_text())
    assert Path(again.trainer.log_dir).resolve().is_relative_to(tmp_path / "b")
    assert saved_first.pop("trainer")["default_root_dir"] == "a"
    assert saved_again.pop("trainer")["default_root_dir"] == "b"
    assert saved_first == saved_again


def test_each_subcommand_runs_its_trainer_method_with_hooks_around_it() -> None:
    fit = RecordingCLI(Regressor, BoringDataModule, args=["fit", *_SHORT])
    assert fit.calls == ["before_fit", "after_fit"] and fit.trainer.global_step == 4
    assert fit.trainer.checkpoint_callback is not None
    checkpoint = fit.trainer.checkpoint_callback.best_model_path
    assert checkpoint
    for name in ("validate", "test", "predict"):
        cli = RecordingCLI(Regressor, BoringDataModule, save_config_kwargs={"overwrite": True},
                           args=[name, f"--ckpt_path={checkpoint}", *_SHORT])
        assert cli.calls == [f"before_{name}", f"after_{name}"]
        if name != "predict":
            assert f"{'val' if name == 'validate' else 'test'}_loss" in cli.trainer.callback_metrics


def test_class_paths_for_model_data_optimizer_and_lr_scheduler() -> None:
    demos = "core.lightning.pytorch.demos.boring_classes"
    with pytest.warns(core.CoreWarning, match="configure_optimizers is replaced"):
        cli = CoreCLI(args=["--model", f"{demos}.BoringModel", "--data", f"{demos}.BoringDataModule",
                            "--optimizer", "Adam", "--optimizer.lr", "0.05",
                            "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "3"], run=False)
    assert type(cli.model) is BoringModel and type(cli.datamodule) is BoringDataModule
    assert cli.config["optimizer"]["class_path"] == "torch.optim.Adam"
    [optimizer], [scheduler] = cli.model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["lr"] == 0.05
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and scheduler.step_size == 3
    assert scheduler.optimizer is optimizer
    assert cli.subcommand is None  # run=False: built, not run


class Adam(torch.optim.Optimizer):
    """Another package's optimizer named as torch's (bitsandbytes.optim.Adam is one): defining it makes the bare
    name ``Adam`` match two imported subclasses of Optimizer, as importing bitsandbytes does."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})


class StepLR(torch.optim.Optimizer):
    """An optimizer sharing a name with a torch scheduler: no clash (a scheduler is searched among schedulers)."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})


class Fancy(torch.optim.Optimizer):
    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})


def test_a_bare_optimizer_name_torch_shares_with_another_package_means_torchs(tmp_path: Path) -> None:
    demos = "core.lightning.pytorch.demos.boring_classes"
    base = ["--model", f"{demos}.BoringModel", "--data", f"{demos}.BoringDataModule"]
    with pytest.warns(core.CoreWarning, match="configure_optimizers is replaced"):
        cli = CoreCLI(args=[*base, "--optimizer", "Adam", "--lr_scheduler", "StepLR",
                            "--lr_scheduler.step_size", "3"], run=False)
    assert cli.config["optimizer"]["class_path"] == "torch.optim.Adam"
    assert cli.config["lr_scheduler"]["class_path"] == "torch.optim.lr_scheduler.StepLR"
    (tmp_path / "run.yaml").write_text("optimizer:\n  class_path: Adam\n  init_args: {lr: 0.2}\n")
    with pytest.warns(core.CoreWarning, match="configure_optimizers is replaced"):
        cli = CoreCLI(args=[*base, "--config", str(tmp_path / "run.yaml")], run=False)
    optimizer = cli.model.configure_optimizers()
    assert type(optimizer) is torch.optim.Adam and optimizer.defaults["lr"] == 0.2
    # The other package's class by its class path.
    with pytest.warns(core.CoreWarning, match="configure_optimizers is replaced"):
        cli = CoreCLI(args=[*base, "--optimizer", f"{__name__}.Adam"], run=False)
    optimizer = cli.model.configure_optimizers()
    assert type(optimizer) is Adam


def test_a_bare_name_two_packages_other_than_torch_share_stays_an_error_listing_both(
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = type("Fancy", (torch.optim.Optimizer,), {"__init__": Fancy.__init__, "__module__": "elsewhere"})
    demos = "core.lightning.pytorch.demos.boring_classes"
    with pytest.raises(SystemExit):
        CoreCLI(args=["--model", f"{demos}.BoringModel", "--optimizer", "Fancy"], run=False)
    assert f"{__name__}.Fancy" in capsys.readouterr().err
    del other


def test_instantiate_module_builds_the_class_or_the_named_subclass() -> None:
    from core.cli import instantiate_module

    model = instantiate_module(Regressor, {"hidden": 2})
    assert type(model) is Regressor and model.net[0].out_features == 2
    demo = instantiate_module(core.Module, {"_class_path": "core.lightning.pytorch.demos.boring_classes.DemoModel",
                                            "out_dim": 3})
    assert type(demo).__name__ == "DemoModel" and demo.l1.out_features == 3


def test_logger_and_callbacks_by_class_path_in_a_config_file(tmp_path: Path) -> None:
    from core.lightning.pytorch.cli import LightningCLI

    (tmp_path / "run.yaml").write_text(textwrap.dedent("""
        seed_everything: 3
        trainer:
          logger:
            class_path: core.lightning.pytorch.loggers.CSVLogger
            init_args: {save_dir: csv}
          callbacks:
            - class_path: EarlyStopping
              init_args: {monitor: val_loss, patience: 5}
    """))
    cli = LightningCLI(Regressor, BoringDataModule, run=False, args=["--config", "run.yaml"])
    logger = cli.trainer.logger
    assert isinstance(logger, core.loggers.CSVLogger) and logger.name == "lightning_logs"  # Lightning's class
    stopping = cli.trainer.early_stopping_callback
    assert stopping is not None and stopping.monitor == "val_loss" and stopping.patience == 5


def test_save_config_callback_refuses_to_overwrite_and_can_be_turned_off(tmp_path: Path) -> None:
    words = ["fit", "--trainer.logger=false", "--trainer.default_root_dir=run", *_SHORT]
    CoreCLI(BoringModel, BoringDataModule, args=words)
    saved = tmp_path / "run" / "config.yaml"
    assert yaml.safe_load(saved.read_text())["trainer"]["logger"] is False
    with pytest.raises(SaveConfigError, match=r"would overwrite .*config.yaml.*save_config_callback=None"):
        CoreCLI(BoringModel, BoringDataModule, args=words)
    saved.unlink()
    CoreCLI(BoringModel, BoringDataModule, save_config_callback=None, args=words)
    assert not saved.exists()
    cli = CoreCLI(BoringModel, BoringDataModule, save_config_kwargs={"config_filename": "run.yaml"}, args=words)
    assert (tmp_path / "run" / "run.yaml").is_file()
    assert any(isinstance(c, SaveConfigCallback) for c in cli.trainer.callbacks)
    quick = CoreCLI(BoringModel, BoringDataModule, args=["fit", "--trainer.fast_dev_run=true", *_QUIET])
    assert not any(isinstance(c, SaveConfigCallback) for c in quick.trainer.callbacks)  # Lightning skips it too


def test_a_bad_config_key_exits_naming_the_key_and_the_close_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_text("trainer:\n  max_epoch: 1\n")
    with pytest.raises(SystemExit) as excinfo:
        CoreCLI(Regressor, BoringDataModule, args=["fit", "--config", "bad.yaml"])
    assert excinfo.value.code == 2
    error = capsys.readouterr().err
    assert "trainer.max_epoch" in error and "Did you mean 'trainer.max_epochs'" in error
    with pytest.raises(SystemExit):
        CoreCLI(Regressor, BoringDataModule, args=["fit", "--model.hiden=3"])
    assert "Did you mean 'model.hidden'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        CoreCLI(Regressor, BoringDataModule, args=["fit", "--model.hidden=three"])
    assert "model.hidden" in capsys.readouterr().err


def test_lightning_cli_writes_its_config_into_lightning_logs(tmp_path: Path) -> None:
    from core.lightning.pytorch.cli import LightningArgumentParser, LightningCLI

    cli = LightningCLI(Regressor, BoringDataModule, trainer_defaults={"max_epochs": 1},
                       args=["fit", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", *_QUIET])
    assert isinstance(cli.parser, LightningArgumentParser)
    log_dir = Path(cli.trainer.log_dir).resolve()
    assert log_dir.relative_to(tmp_path).parts[:2] == ("lightning_logs", "version_0")
    saved = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert saved["trainer"]["max_epochs"] == 1 and saved["model"]["hidden"] == 4
    assert cli.trainer.global_step == 2


def test_a_script_reads_its_command_line_from_sys_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.lightning.pytorch.cli import LightningCLI

    (tmp_path / "config.yaml").write_text("trainer:\n  max_steps: 3\n  enable_progress_bar: false\n"
                                          "  enable_model_summary: false\n  limit_val_batches: 0\n")
    monkeypatch.setattr(sys, "argv", ["train.py", "fit", "--config", "config.yaml", "--trainer.max_steps", "2"])
    cli = LightningCLI(BoringModel, BoringDataModule)  # args=None: the script's own command line
    assert cli.subcommand == "fit" and cli.trainer.global_step == 2  # the command line wins over the file
    assert (tmp_path / "lightning_logs" / "version_0" / "config.yaml").is_file()


def test_help_lists_the_subcommands_and_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        CoreCLI(Regressor, BoringDataModule, args=["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("fit", "validate", "test", "predict"))
    with pytest.raises(SystemExit):
        CoreCLI(Regressor, BoringDataModule, args=["fit", "--help"])
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--trainer.max_epochs", "--model.hidden", "--optimizer", "--ckpt_path"))


@pytest.mark.distributed
def test_two_ddp_processes_run_from_the_command_line_and_write_one_config(tmp_path: Path) -> None:
    # Each rank runs the script (core's ddp launcher); rank zero looks for an earlier config.yaml and broadcasts.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import os

        from core.lightning.pytorch.cli import LightningCLI
        from core.lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

        if __name__ == "__main__":
            cli = LightningCLI(BoringModel, BoringDataModule)
            # One write per line: both ranks share the pipe, and print() writes its pieces one by one unbuffered.
            os.write(1, f"rank {cli.trainer.global_rank} steps {cli.trainer.global_step}\\n".encode())
    """))
    words = [sys.executable, str(script), "fit", "--trainer.accelerator=cpu", "--trainer.strategy=ddp",
             "--trainer.devices=2", "--trainer.max_steps=2", "--trainer.limit_val_batches=1",
             "--trainer.logger=false", "--trainer.default_root_dir=run", *_QUIET]
    first = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "rank 0 steps 2" in first.stdout and "rank 1 steps 2" in first.stdout
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["trainer"]["devices"] == 2
