"""Lightning's small public names and Trainer members that Lightning programs (and Lightning's own tests) use.

Each behaviour here was found by running Lightning 2.6's tests against ``core.lightning``
(scripts/lightning_tests.py); CI has no Lightning checkout, so these tests say it in this project's words.
"""

from __future__ import annotations

import importlib
import json
import os
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch

import core
import core.lightning as L
from core.lightning._names import UnsupportedLightningName
from core.lightning.pytorch.demos.boring_classes import BoringModel
from core.loggers import CSVLogger, Logger


def _lightning(module: str, name: str) -> Any:
    """``lightning.<module>.<name>`` as core.lightning answers it (modules made by core/lightning/_finder.py)."""
    return getattr(importlib.import_module(f"core.lightning.{module}"), name)


def _trainer(tmp_path: Path, **flags: Any) -> Any:
    settings: dict[str, Any] = dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
    )
    return L.Trainer(**{**settings, **flags})


def test_lightning_exception_and_warning_names_are_cores_so_except_clauses_catch_what_core_raises() -> None:
    PossibleUserWarning = _lightning("fabric.utilities.warnings", "PossibleUserWarning")
    MisconfigurationException = _lightning("pytorch.utilities.exceptions", "MisconfigurationException")

    assert MisconfigurationException is core.ConfigurationError
    assert issubclass(PossibleUserWarning, core.CoreWarning)
    with pytest.raises(MisconfigurationException, match="max_epochs"):
        L.Trainer(max_epochs=-2)


def test_version_is_cores() -> None:
    import core.lightning.fabric
    import core.lightning.pytorch

    assert L.__version__ == core.lightning.pytorch.__version__ == core.lightning.fabric.__version__ == core.__version__


def test_trainer_state_says_what_ran_and_how_it_ended(tmp_path: Path) -> None:
    RunningStage = _lightning("pytorch.trainer.states", "RunningStage")
    TrainerFn = _lightning("pytorch.trainer.states", "TrainerFn")
    TrainerStatus = _lightning("pytorch.trainer.states", "TrainerStatus")

    trainer = _trainer(tmp_path)
    assert trainer.state.status == TrainerStatus.INITIALIZING and trainer.state.fn is None
    seen: list[tuple[Any, Any, Any]] = []

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            seen.append((trainer.state.status, trainer.state.fn, trainer.state.stage))

    trainer.callbacks.append(Watch())
    trainer.fit(BoringModel())
    assert seen[0] == (TrainerStatus.RUNNING, TrainerFn.FITTING, RunningStage.TRAINING)
    assert trainer.state.finished and trainer.state.fn == "fit" and TrainerFn.FITTING == "FIT"
    trainer.validate(BoringModel(), verbose=False)
    assert trainer.state.fn == TrainerFn.VALIDATING and trainer.state.finished and not trainer.interrupted


def test_an_exception_in_a_run_leaves_the_trainer_interrupted(tmp_path: Path) -> None:
    class Failing(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise RuntimeError("boom")

    trainer = _trainer(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing())
    assert trainer.interrupted and not trainer.state.finished


def test_ctrl_c_shuts_down_gracefully_and_exits_with_code_1(tmp_path: Path) -> None:
    exceptions: list[BaseException] = []

    class Interrupted(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise KeyboardInterrupt

    class Record(L.Callback):
        def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
            exceptions.append(exception)

    trainer = _trainer(tmp_path, callbacks=[Record()])
    with pytest.raises(SystemExit) as exit_info:
        trainer.fit(Interrupted())
    assert exit_info.value.code == 1
    assert trainer.interrupted and isinstance(exceptions[0], KeyboardInterrupt)


def test_ckpt_path_is_the_checkpoint_the_latest_run_loaded(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    assert trainer.ckpt_path is None
    trainer.fit(BoringModel())
    assert trainer.ckpt_path is None
    path = tmp_path / "saved.ckpt"
    trainer.save_checkpoint(path)
    trainer.validate(BoringModel(), ckpt_path=path, verbose=False)
    assert trainer.ckpt_path == os.fspath(path)


def test_early_stopping_callbacks_and_init_module(tmp_path: Path) -> None:
    stopping = L.pytorch.callbacks.EarlyStopping(monitor="x")
    trainer = _trainer(tmp_path, callbacks=[stopping])
    assert trainer.early_stopping_callbacks == [stopping]
    with trainer.init_module():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.device == trainer.lite.device


def test_a_name_logged_on_step_and_epoch_is_monitored_by_its_bare_name(tmp_path: Path) -> None:
    class Logs(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            out = super().training_step(batch, batch_idx)
            self.log("foo", out["loss"], on_step=True, on_epoch=True)
            return out

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="foo")
    trainer = _trainer(tmp_path, max_epochs=2, limit_val_batches=0, enable_checkpointing=True,
                       callbacks=[checkpoint])
    trainer.fit(Logs())
    metrics = trainer.callback_metrics
    assert {"foo", "foo_step", "foo_epoch"} <= set(metrics)
    assert torch.equal(metrics["foo"], metrics["foo_epoch"])  # after the epoch: the epoch value
    # ModelCheckpoint(monitor="foo") found the name and ranked the epochs by it (mode="min": the lower epoch value)
    assert Path(checkpoint.best_model_path).exists() and checkpoint.best_model_score is not None
    assert float(checkpoint.best_model_score) <= float(metrics["foo_epoch"])


def test_lightning_seed_everything_reads_and_sets_pl_global_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    reset_seed = _lightning("fabric.utilities.seed", "reset_seed")
    seed_everything = _lightning("fabric.utilities.seed", "seed_everything")

    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PL_GLOBAL_SEED", "2020")
    assert seed_everything() == 2020
    first = torch.rand(1)
    assert seed_everything(7, workers=True) == 7
    assert os.environ["PL_GLOBAL_SEED"] == "7" and os.environ["PL_SEED_WORKERS"] == "1"
    monkeypatch.setenv("PL_GLOBAL_SEED", "2020")
    reset_seed()
    assert torch.equal(torch.rand(1), first)
    monkeypatch.setenv("PL_GLOBAL_SEED", "not a number")
    with pytest.raises(ValueError, match="Invalid seed specified via PL_GLOBAL_SEED: 'not a number'"):
        seed_everything()


def test_apply_func_helpers() -> None:
    convert_tensors_to_scalars = _lightning("fabric.utilities.apply_func", "convert_tensors_to_scalars")
    convert_to_tensors = _lightning("fabric.utilities.apply_func", "convert_to_tensors")
    move_data_to_device = _lightning("fabric.utilities.apply_func", "move_data_to_device")

    batch = {"x": [torch.ones(1), (torch.zeros(2),)], "name": "a"}
    moved = move_data_to_device(batch, "cpu")
    assert moved["name"] == "a" and torch.equal(moved["x"][1][0], torch.zeros(2))
    assert convert_tensors_to_scalars({"a": torch.tensor(2.5), "b": [torch.tensor(1)]}) == {"a": 2.5, "b": [1]}
    with pytest.raises(ValueError, match="does not contain a single element"):
        convert_tensors_to_scalars(torch.ones(2))
    converted = convert_to_tensors({"a": 1, "b": [2.0]}, "cpu")
    assert torch.equal(converted["a"], torch.tensor(1)) and torch.equal(converted["b"][0], torch.tensor(2.0))


def test_saving_helpers_round_trip_hparams(tmp_path: Path) -> None:
    load_hparams_from_tags_csv = _lightning("pytorch.core.saving", "load_hparams_from_tags_csv")
    load_hparams_from_yaml = _lightning("pytorch.core.saving", "load_hparams_from_yaml")
    save_hparams_to_tags_csv = _lightning("pytorch.core.saving", "save_hparams_to_tags_csv")
    save_hparams_to_yaml = _lightning("pytorch.core.saving", "save_hparams_to_yaml")
    update_hparams = _lightning("pytorch.core.saving", "update_hparams")

    save_hparams_to_yaml(tmp_path / "h.yaml", Namespace(lr=0.1, layers=[1, 2]))
    assert load_hparams_from_yaml(tmp_path / "h.yaml") == {"lr": 0.1, "layers": [1, 2]}
    save_hparams_to_tags_csv(tmp_path / "tags.csv", {"lr": 0.1, "name": "x"})
    assert load_hparams_from_tags_csv(tmp_path / "tags.csv") == {"lr": 0.1, "name": "x"}
    hparams: dict[str, Any] = {"a": {"b": 1, "c": 2}}
    update_hparams(hparams, {"a": {"b": 3}, "d": 4})
    assert hparams == {"a": {"b": 3, "c": 2}, "d": 4}


def test_dummy_logger_and_early_stopping_reason() -> None:
    EarlyStoppingReason = _lightning("pytorch.callbacks.early_stopping", "EarlyStoppingReason")
    DummyLogger = _lightning("pytorch.loggers.logger", "DummyLogger")

    logger = DummyLogger()
    assert logger.experiment.add_image("x") is None and logger[0] is logger and logger.name == ""
    logger.log_metrics({"a": 1.0}, step=0)
    assert EarlyStoppingReason.PATIENCE_EXHAUSTED.value == 3


def test_precision_base_works_in_annotations_and_refuses_subclassing_with_the_plugin_way() -> None:
    Precision = _lightning("fabric.plugins", "Precision")

    with pytest.raises(UnsupportedLightningName, match=r"@core\.hookimpl methods.*core\.plugins new precision"):

        class Mine(Precision):  # type: ignore[misc,valid-type]  # a value to mypy: the finder makes the class
            pass


def test_a_step_hook_set_to_none_counts_as_not_defined(tmp_path: Path) -> None:
    model: Any = BoringModel()
    model.validation_step = None
    model.val_dataloader = None
    trainer = _trainer(tmp_path)
    trainer.fit(model)  # no validation loop, no error about calling None
    assert trainer.state.finished and "x" not in trainer.callback_metrics


def test_two_stateless_callbacks_of_one_class_are_accepted_and_stateful_twins_refused(tmp_path: Path) -> None:
    calls: list[int] = []

    class Count(L.Callback):
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            calls.append(id(self))

    trainer = _trainer(tmp_path, callbacks=[Count(), Count()])
    trainer.fit(BoringModel())
    assert len(set(calls)) == 2

    class Stateful(Count):
        def state_dict(self) -> dict[str, Any]:
            return {"n": 1}

    with pytest.raises(core.ConfigurationError, match="Several callbacks with a state share the state key"):
        _trainer(tmp_path, callbacks=[Stateful(), Stateful()])


def test_a_logger_of_your_own_needs_no_save_dir_and_hyperparameters_may_be_a_namespace(tmp_path: Path) -> None:
    received: list[tuple[dict[str, float], int | None]] = []

    class Mine(Logger):
        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            received.append((dict(metrics), step))

    class Logs(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            out = super().training_step(batch, batch_idx)
            self.log("loss", out["loss"])
            return out

    logger = Mine()
    trainer = _trainer(tmp_path, logger=logger, log_every_n_steps=1)
    trainer.fit(Logs())
    assert logger.save_dir == os.fspath(tmp_path)  # the run gave it default_root_dir
    assert len(received) == 2 and all("loss" in metrics and isinstance(step, int) for metrics, step in received)
    logger.log_hyperparams(Namespace(lr=0.5))  # Lightning programs pass argparse's namespace
    assert json.loads((Path(logger.log_dir) / "hparams.json").read_text()) == {"lr": 0.5}


def test_csv_logger_without_a_step_appends_rows_and_is_its_own_experiment(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.experiment.log_metrics({"a": 1.0})
    logger.log_metrics({"a": 2.0})
    logger.save()
    rows = Path(logger.metrics_file).read_text().splitlines()
    assert rows == ["step,a", "0,1.0", "1,2.0"]


def test_a_set_up_module_has_a_device() -> None:
    lite = core.Lite(accelerator="cpu")
    module = lite.setup_module(torch.nn.Linear(2, 2))
    assert module.device == torch.device("cpu")


def test_trainer_strategy_is_the_plugin_with_lightnings_strategy_members(tmp_path: Path) -> None:
    single = _lightning("pytorch.strategies", "SingleDeviceStrategy")
    ddp = _lightning("pytorch.strategies", "DDPStrategy")
    trainer = _trainer(tmp_path)
    assert trainer.strategy.root_device == torch.device("cpu") and trainer.device_ids == [0]
    model = BoringModel()
    trainer.fit(model)
    assert isinstance(trainer.strategy, single) and not isinstance(trainer.strategy, ddp)
    assert trainer.strategy.model is model
    two: Any = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    assert isinstance(two.strategy, ddp) and two.device_ids == [0, 1] and two.num_devices == 2


def _checkpoints(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


def test_model_checkpoint_saves_after_each_validation_when_it_runs_several_times_an_epoch(tmp_path: Path) -> None:
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
    trainer = _trainer(tmp_path, limit_train_batches=4, val_check_interval=0.5, enable_checkpointing=True,
                       callbacks=[checkpoint], num_sanity_val_steps=0)
    trainer.fit(BoringModel())
    assert _checkpoints(tmp_path / "ckpt") == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]


def test_model_checkpoint_save_on_train_epoch_end_and_every_n_epochs_zero(tmp_path: Path) -> None:
    at_end = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "end", save_top_k=-1, save_on_train_epoch_end=True)
    never = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "never", every_n_epochs=0, save_last=False)
    trainer = _trainer(tmp_path, limit_train_batches=4, val_check_interval=0.5, enable_checkpointing=True,
                       callbacks=[at_end, never], num_sanity_val_steps=0)
    trainer.fit(BoringModel())
    assert _checkpoints(tmp_path / "end") == ["epoch=0-step=4.ckpt"]
    assert _checkpoints(tmp_path / "never") == []


def test_model_checkpoint_saves_on_exception_and_can_overwrite_without_a_version(tmp_path: Path) -> None:
    class Failing(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == 1:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_on_exception=True,
                                                     filename="fixed", enable_version_counter=False)
    trainer = _trainer(tmp_path, enable_checkpointing=True, callbacks=[checkpoint])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing())
    assert _checkpoints(tmp_path / "ckpt") == ["fixed.ckpt"]
    again = _trainer(tmp_path, enable_checkpointing=True, callbacks=[checkpoint])
    with pytest.raises(RuntimeError, match="boom"):
        again.fit(Failing())
    assert _checkpoints(tmp_path / "ckpt") == ["fixed.ckpt"]  # overwritten: no fixed-v1.ckpt


def test_datamodule_from_datasets_hands_out_loaders_of_the_given_datasets(tmp_path: Path) -> None:
    from torch.utils.data import TensorDataset

    train = TensorDataset(torch.randn(8, 32))
    vals = [TensorDataset(torch.randn(4, 32)), TensorDataset(torch.randn(6, 32))]
    datamodule = core.DataModule.from_datasets(train, vals, batch_size=2)
    assert len(datamodule.train_dataloader()) == 4
    assert [len(loader) for loader in datamodule.val_dataloader()] == [2, 3]
    assert datamodule.test_dataloader() is None  # not given: the class's method

    class Sized(core.DataModule):
        def __init__(self, batch_size: int, extra: str) -> None:
            super().__init__()
            self.batch_size, self.extra = batch_size, extra

    sized = Sized.from_datasets(train, batch_size=4, extra="x")
    assert (sized.batch_size, sized.extra) == (4, "x")  # type: ignore[attr-defined]


def test_model_checkpoint_to_yaml_writes_the_best_k_scores(tmp_path: Path) -> None:
    import yaml

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path)
    checkpoint.best_k_models = {"a.ckpt": 0.5, "b.ckpt": 0.25}
    checkpoint.to_yaml()
    assert yaml.safe_load((tmp_path / "best_k_models.yaml").read_text()) == {"a.ckpt": 0.5, "b.ckpt": 0.25}


def test_lightning_trainer_reads_num_sanity_val_steps_minus_one_as_infinity(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, num_sanity_val_steps=-1)
    assert trainer.num_sanity_val_steps == float("inf")
    checked: list[int] = []

    class Count(L.Callback):
        def on_validation_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            if trainer.sanity_checking:
                checked.append(1)

    trainer.callbacks.append(Count())
    trainer.fit(BoringModel())
    assert len(checked) == 2  # every batch of limit_val_batches=2
    assert len(trainer.predict(BoringModel(), dataloaders=BoringModel().val_dataloader(),
                               return_predictions=None)) > 0


def test_reduce_fx_takes_lightnings_spellings_and_logged_metrics_hold_no_epoch(tmp_path: Path) -> None:
    received: list[dict[str, float]] = []

    class Mine(Logger):
        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            received.append(dict(metrics))

    class Logs(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            out = super().training_step(batch, batch_idx)
            self.log("peak", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=torch.max)
            self.log("low", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=min)
            self.log("avg", float(batch_idx), on_step=False, on_epoch=True, reduce_fx="AVG")
            return out

    trainer = _trainer(tmp_path, limit_train_batches=4, limit_val_batches=0, logger=Mine())
    trainer.fit(Logs())
    assert trainer.logged_metrics == {"peak": 3.0, "low": 0.0, "avg": 1.5}
    assert received[-1]["epoch"] == 0  # the loggers get the epoch, as Lightning's do
    with pytest.raises(core.ConfigurationError, match=r"reduce_fx='median'.*torch\.mean"):
        _trainer(tmp_path).fit(_Median())


class _Median(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("x", 1.0, reduce_fx="median")
        return super().training_step(batch, batch_idx)


def test_a_dotted_path_through_the_namespace_resolves_as_in_a_real_package() -> None:
    import pkgutil
    from unittest import mock

    loggers = importlib.import_module("core.lightning.pytorch.loggers")
    assert pkgutil.resolve_name("core.lightning.pytorch.loggers.CSVLogger.log_metrics") is (
        loggers.CSVLogger.log_metrics)
    with mock.patch("core.lightning.pytorch.loggers.CSVLogger.log_metrics") as patched:
        assert loggers.CSVLogger.log_metrics is patched
    with pytest.raises(UnsupportedLightningName, match="Did you mean 'EarlyStopping'"):
        importlib.import_module("core.lightning.pytorch.callbacks.EarlyStoping")


def test_evaluating_after_fit_without_a_model_loads_the_best_checkpoint(tmp_path: Path) -> None:
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt")
    trainer = _trainer(tmp_path, enable_checkpointing=True, callbacks=[checkpoint])
    trainer.fit(BoringModel())
    with pytest.warns(core.CoreWarning, match="The best model of the previous `fit` call will be used"):
        trainer.validate(verbose=False)
    assert trainer.ckpt_path == checkpoint.best_model_path
    trainer.test(BoringModel(), verbose=False)  # a model given: no checkpoint
    assert trainer.ckpt_path is None
    plain = _trainer(tmp_path)
    plain.fit(BoringModel())
    with pytest.raises(ValueError, match="`ModelCheckpoint` is not configured"), pytest.warns(core.CoreWarning):
        plain.test()


def test_csv_logger_files_are_named_by_lightnings_experiment_writer(tmp_path: Path) -> None:
    writer = _lightning("pytorch.loggers.csv_logs", "ExperimentWriter")
    logger = L.pytorch.loggers.CSVLogger(tmp_path)
    logger.log_hyperparams()  # no hyperparameters: an empty file, as Lightning's
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"a": 1.0}, 0)
    logger.save()
    assert (Path(logger.log_dir) / writer.NAME_METRICS_FILE).is_file()
    assert (Path(logger.log_dir) / writer.NAME_HPARAMS_FILE).is_file()


def test_a_custom_logger_decorated_with_rank_zero_only_imports_from_lightnings_module() -> None:
    rank_zero_only = _lightning("pytorch.utilities.rank_zero", "rank_zero_only")
    calls: list[dict[str, float]] = []

    class Mine(Logger):
        @rank_zero_only
        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            calls.append(dict(metrics))

    Mine().log_metrics({"a": 1.0})
    assert calls == [{"a": 1.0}]
    assert _lightning("fabric.utilities.rank_zero", "rank_zero_only") is rank_zero_only
