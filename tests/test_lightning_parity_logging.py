"""Logging as Lightning 2.6 does it (issue 48): the loggers' step numbers, evaluation step values, the keys and
types of the Trainer's metric dicts, ``self.log``'s refusals, logging from callbacks, and what loggers of one's own
and the CSV logger offer. Each test runs a tiny fit in this process."""

from __future__ import annotations

import argparse
import importlib
import io
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import CSVLogger, Logger


class Recorder(Logger):
    """Keeps every ``log_metrics`` call; fails if the Trainer passes its arguments by position."""

    def __init__(self) -> None:
        super().__init__(save_dir=".", name="recorder", version=0)
        self.calls: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        assert not args and set(kwargs) == {"metrics", "step"}, "the Trainer calls log_metrics(metrics=, step=)"
        self.calls.append((kwargs["step"], dict(kwargs["metrics"])))

    def log_hyperparams(self, params: Any = None) -> None:
        pass

    def steps_of(self, name: str) -> list[int | None]:
        return [step for step, metrics in self.calls if name in metrics]


def loader(batches: int, seed: int = 0) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(4 * batches, 3, generator=generator)
    return DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=4)


class Net(core.Module):
    """Logs ``loss`` in training (step values) and ``val_loss`` in validation (epoch values)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def loss(self, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("test_loss", self.loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(logger: Any = False, **flags: Any) -> core.Trainer:
    options: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "max_epochs": 1, "enable_progress_bar": False,
                               "enable_model_summary": False, "enable_checkpointing": False, "logger": logger,
                               "num_sanity_val_steps": 0}
    options.update(flags)
    return core.Trainer(**options)


# -- step numbers --------------------------------------------------------------------------------------------------


def test_a_batch_logs_under_the_count_of_batches_that_stepped_before_it() -> None:
    recorder = Recorder()
    trainer(recorder, max_epochs=2, log_every_n_steps=2).fit(Net(), loader(4), loader(2))
    assert recorder.steps_of("loss") == [1, 3, 5, 7]  # the 2nd, 4th, ... batch (global steps 2, 4, ...)
    assert recorder.steps_of("val_loss") == [3, 7]  # the epoch's last batch
    assert [metrics["epoch"] for _, metrics in recorder.calls if "loss" in metrics] == [0, 0, 1, 1]


def test_on_train_start_values_belong_to_the_first_epoch_only() -> None:
    class Early(Net):
        def on_train_start(self) -> None:
            self.log("early", 123.0)

    recorder = Recorder()
    trainer(recorder, max_epochs=2, limit_val_batches=0, log_every_n_steps=1).fit(Early(), loader(1))
    assert [(step, metrics) for step, metrics in recorder.calls if "early" in metrics] == [
        (0, {"early": 123.0, "epoch": 0})]


def test_manual_optimization_counts_batches_not_optimizer_steps() -> None:
    class TwoSteps(Net):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            for optimizer in self.optimizers():
                optimizer.zero_grad()
                self.manual_backward(self.loss(batch))
                optimizer.step()
            self.log("loss", self.loss(batch))

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.01), torch.optim.SGD(self.parameters(), lr=0.01)]

    recorder = Recorder()
    fitted = trainer(recorder, limit_val_batches=0, log_every_n_steps=1)
    fitted.fit(TwoSteps(), loader(3))
    assert fitted.global_step == 6
    assert recorder.steps_of("loss") == [0, 1, 2]


def test_a_logged_step_value_is_the_loggers_step() -> None:
    class Stepping(Net):
        def on_train_epoch_end(self) -> None:
            self.log("step", 100.0 + self.current_epoch)
            self.log("score", 1.0)

    recorder = Recorder()
    trainer(recorder, max_epochs=2, limit_val_batches=0).fit(Stepping(), loader(2))
    assert [(step, metrics) for step, metrics in recorder.calls if "score" in metrics] == [
        (100, {"score": 1.0}), (101, {"score": 1.0})]  # no "step" value, no "epoch"


# -- evaluation step values ----------------------------------------------------------------------------------------


class StepLogging(Net):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_step", float(batch_idx), on_step=True, on_epoch=False, prog_bar=True)
        self.log("val_both", self.loss(batch), on_step=True, on_epoch=True)


def test_evaluation_step_values_go_at_once_under_each_loaders_batch_count() -> None:
    recorder = Recorder()
    fitted = trainer(recorder, max_epochs=2, limit_train_batches=1)
    fitted.fit(StepLogging(), loader(1), [loader(2), loader(2, seed=1)])
    for index in (0, 1):
        name = f"val_step/dataloader_idx_{index}"
        assert [(step, metrics[name]) for step, metrics in recorder.calls if name in metrics] == [
            (0, 0.0), (1, 1.0), (2, 0.0), (3, 1.0)]  # the count goes on over fit's validations
    step_calls = [metrics for _, metrics in recorder.calls if "val_step/dataloader_idx_0" in metrics]
    assert all("epoch" not in metrics for metrics in step_calls)
    epoch_keys = {key for _, metrics in recorder.calls for key in metrics if key.startswith("val_both_epoch")}
    assert epoch_keys == {"val_both_epoch/dataloader_idx_0", "val_both_epoch/dataloader_idx_1"}
    # Step values are logged metrics and progress-bar values, but no callback metrics.
    assert {"val_step/dataloader_idx_0", "val_both_step/dataloader_idx_1"} <= set(fitted.logged_metrics)
    assert fitted.progress_bar_metrics["val_step/dataloader_idx_1"] == 1.0
    assert "val_step/dataloader_idx_0" not in fitted.callback_metrics
    assert "val_both/dataloader_idx_0" in fitted.callback_metrics  # the bare name: the epoch value

    recorder.calls.clear()
    fitted.validate(StepLogging(), [loader(2)])
    assert recorder.steps_of("val_step") == [0, 1]  # validate counts from 0


# -- the Trainer's metric dicts ------------------------------------------------------------------------------------


def test_metric_dicts_hold_float32_tensors_and_each_entry_point_starts_empty() -> None:
    fitted = trainer(log_every_n_steps=50)
    fitted.fit(Net(), loader(3), loader(2))
    assert isinstance(fitted.logged_metrics["loss"], torch.Tensor)  # a step value, though no logging step came
    assert fitted.callback_metrics["val_loss"].dtype == torch.float32
    fitted.test(Net(), loader(2))
    assert set(fitted.callback_metrics) == {"test_loss"}
    assert set(fitted.logged_metrics) == {"test_loss"}


def test_the_loggers_get_epoch_in_test_too() -> None:
    recorder = Recorder()
    trainer(recorder).test(Net(), loader(2))
    [(step, metrics)] = recorder.calls
    assert step == 0 and set(metrics) == {"test_loss", "epoch"} and metrics["epoch"] == 0


def test_a_callback_logs_through_the_module() -> None:
    class Logging(core.Callback):
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            self.log("from_callback", 2.0)  # type: ignore[attr-defined]

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            self.log_dict({"batch_end": 3.0})  # type: ignore[attr-defined]

    callback = Logging()
    fitted = trainer(callbacks=[callback], limit_val_batches=0)
    fitted.fit(Net(), loader(2))
    assert float(fitted.callback_metrics["from_callback"]) == 2.0
    assert float(fitted.callback_metrics["batch_end"]) == 3.0
    assert "log" not in vars(callback), "the Module's log is lent for the run only"


# -- self.log's refusals -------------------------------------------------------------------------------------------


def _fit_logging(value: Any, **options: Any) -> None:
    class Bad(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("foo", value, **options)
            return self.loss(batch)

    trainer(limit_val_batches=0).fit(Bad(), loader(1))


@pytest.mark.parametrize("value", [None, "text", {"a": 1}, {"a": {"b": 1}}, [1, 2]])
def test_a_value_that_cannot_be_logged_is_refused_in_lightnings_words(value: Any) -> None:
    with pytest.raises(core.ConfigurationError, match=rf"`self.log\(foo, {value!s}\)` was called".replace("[", r"\[")):
        _fit_logging(value)


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        ({"on_step": False, "on_epoch": False}, r"`self.log\(on_step=False, on_epoch=False\)` is not useful"),
        ({"reduce_fx": torch.argmax}, r"reduce_fx=\{min,max,mean,sum\}\)` are supported"),
    ],
)
def test_options_that_keep_nothing_are_refused(options: dict[str, Any], phrase: str) -> None:
    with pytest.raises(core.ConfigurationError, match=phrase):
        _fit_logging(1.0, **options)


def test_a_key_with_a_loader_suffix_and_a_name_logged_with_other_options_are_refused() -> None:
    class Suffixed(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("foo/dataloader_idx_0", 1.0)
            return self.loss(batch)

    with pytest.raises(core.ConfigurationError, match=r"`self\.log` with the key `foo/dataloader_idx_0`"):
        trainer(limit_val_batches=0).fit(Suffixed(), loader(1))

    class Twice(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("foo", 1.0, prog_bar=False)
            self.log("foo", 1.0, prog_bar=True)
            return self.loss(batch)

    with pytest.raises(core.ConfigurationError, match=r"`self.log\(foo, ...\)` twice in `training_step`.*prog_bar"):
        trainer(limit_val_batches=0).fit(Twice(), loader(1))


def test_a_logged_metric_must_be_an_attribute_of_the_module() -> None:
    torchmetrics = pytest.importorskip("torchmetrics")

    class Loose(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("acc", torchmetrics.MeanMetric())
            return self.loss(batch)

    with pytest.raises(core.ConfigurationError, match="setting an attribute for the metric"):
        trainer(limit_val_batches=0).fit(Loose(), loader(1))

    class Other(Loose):
        def __init__(self) -> None:
            super().__init__()
            self.kept = torchmetrics.MeanMetric()

    with pytest.raises(core.ConfigurationError, match=r"metric_attribute=name\)` where `name` is one of \['kept'\]"):
        trainer(limit_val_batches=0).fit(Other(), loader(1))


# -- hyperparameters, hooks set to None ----------------------------------------------------------------------------


def test_differing_hyperparameters_of_module_and_datamodule_are_refused() -> None:
    class WithParams(Net):
        def __init__(self, size: int) -> None:
            super().__init__()
            self.save_hyperparameters()

    class Data(core.DataModule):
        def __init__(self, size: int) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self) -> DataLoader[Any]:
            return loader(1)

    with pytest.raises(RuntimeError, match=r"Error while merging hparams: the keys \['size'\]"):
        trainer(Recorder(), limit_val_batches=0).fit(WithParams(1), datamodule=Data(2))
    trainer(Recorder(), limit_val_batches=0).fit(WithParams(1), datamodule=Data(1))  # the same value is fine


def test_a_dataloader_hook_set_to_none_gives_no_loader() -> None:
    model = Net()
    model.val_dataloader = None  # type: ignore[assignment,method-assign]
    model.train_dataloader = lambda: loader(1)  # type: ignore[method-assign]
    fitted = trainer()
    fitted.fit(model)
    assert "val_loss" not in fitted.callback_metrics


# -- loggers -------------------------------------------------------------------------------------------------------


def test_a_logger_answering_no_save_dir_writes_its_checkpoints_under_default_root_dir(tmp_path: Path) -> None:
    class Remote(Logger):
        def __init__(self) -> None:
            super().__init__()
            self.logged: list[Mapping[str, float]] = []

        @property
        def save_dir(self) -> None:
            return None

        @property
        def name(self) -> str:
            return "run"

        @property
        def version(self) -> str:
            return "1"

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            self.logged.append(metrics)

        def log_hyperparams(self, params: Any = None) -> None:
            pass

    import core.lightning as L

    logger = Remote()
    fitted = L.Trainer(accelerator="cpu", max_steps=2, logger=logger, default_root_dir=tmp_path,
                       log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False)
    fitted.fit(Net(), loader(2), loader(1))
    assert logger.logged
    assert (tmp_path / "run" / "1" / "checkpoints").is_dir()


@pytest.mark.parametrize("name", ["", None])
def test_a_logger_without_a_name_writes_straight_into_save_dir(tmp_path: Path, name: str | None) -> None:
    logger = CSVLogger(tmp_path, name=name)
    logger.log_hyperparams(argparse.Namespace(a=1))
    assert os.path.normpath(logger.root_dir) == str(tmp_path)
    assert os.listdir(tmp_path / "version_0")


def test_csv_logger_shows_its_pending_rows_and_replaces_an_earlier_runs_file(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    logger.log_metrics({"a": 1.0})
    assert logger.experiment.metrics == [{"step": 0, "a": 1.0}]
    logger.log_metrics({"a": 2.0})
    assert logger.experiment.metrics == []  # written
    assert logger.metrics_file_path == logger.metrics_file and os.path.isfile(logger.metrics_file)

    again = CSVLogger(tmp_path, version=0)
    with pytest.warns(core.CoreWarning, match="exists and is not empty"):
        again.experiment  # noqa: B018 (the first use is the check)
    assert not os.path.exists(logger.metrics_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CSVLogger(tmp_path, version=1).log_hyperparams({"b": 2})  # a new run: no warning


def test_lightnings_torchmetrics_version_flag() -> None:
    pytest.importorskip("torchmetrics")
    imports = importlib.import_module("core.lightning.pytorch.utilities.imports")  # Lightning's module path
    assert imports._TORCHMETRICS_GREATER_EQUAL_0_11 is True


def test_a_progress_bar_shows_what_get_metrics_returns(tmp_path: Path) -> None:
    from core.callbacks import ProgressBar

    class Shown(ProgressBar):
        def get_metrics(self, trainer: Any, module: Any) -> dict[str, Any]:
            items = super().get_metrics(trainer, module)
            assert items["v_num"] == 0 and "loss" in items  # the logger's version, then the prog_bar values
            items.pop("v_num")
            return {**items, "extra": "shown"}

    class BarLoss(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.loss(batch)
            self.log("loss", loss, prog_bar=True)
            return loss

    stream = io.StringIO()
    bar = Shown(refresh_rate=1, stream=stream)
    trainer(CSVLogger(tmp_path), callbacks=[bar], enable_progress_bar=True, limit_val_batches=0).fit(
        BarLoss(), loader(2))
    assert "extra=shown" in stream.getvalue() and "v_num" not in stream.getvalue()
    assert bar.trainer.current_epoch == 1


@pytest.mark.parametrize("reduce_fx", ["sum", "mean", "max", "min"])
def test_a_synchronised_step_value_is_reduced_by_its_reduce_fx(reduce_fx: str) -> None:
    from core.trainer._logging import MetricStore

    asked: list[str] = []

    def reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:  # two processes logging the same value
        asked.append(op)
        return tensor * 2 if op == "sum" else tensor

    store = MetricStore(reduce, True, torch.device("cpu"))
    store.new_batch(torch.zeros(4, 1))
    store.log("foo", 3.0, False, True, True, False, reduce_fx, True, False, None, True)
    assert asked == [reduce_fx]
    assert store.step_metrics(for_logger=True) == {"foo": 6.0 if reduce_fx == "sum" else 3.0}


def test_each_loaders_results_hold_what_its_steps_logged() -> None:
    class PerLoader(Net):
        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("shared", 1.0)  # suffixed per loader
            self.log(f"only_{dataloader_idx}", float(dataloader_idx), add_dataloader_idx=False)

        def on_test_epoch_end(self) -> None:
            self.log("whole", 5.0)

    results = trainer().test(PerLoader(), [loader(1), loader(1, seed=1)])
    assert results == [{"shared/dataloader_idx_0": 1.0, "only_0": 0.0, "whole": 5.0},
                       {"shared/dataloader_idx_1": 1.0, "only_1": 1.0, "whole": 5.0}]


def test_the_dummy_experiment_ignores_calls_and_item_assignment() -> None:
    from core.loggers import DummyExperiment, DummyLogger

    experiment = DummyLogger().experiment
    assert isinstance(experiment, DummyExperiment)
    experiment["variable"] = "value"
    assert experiment["variable"] is experiment and experiment.add_image("x", None) is None
    logger_module = importlib.import_module("core.lightning.pytorch.loggers.logger")  # Lightning's module path
    assert logger_module.DummyExperiment is DummyExperiment


def test_csv_logger_writes_to_a_url_through_fsspec() -> None:
    fsspec = pytest.importorskip("fsspec")
    logger = CSVLogger("memory://parity-logging-csv", flush_logs_every_n_steps=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.log_metrics({"loss": 0.25, "acc": 1.0}, step=1)  # a new column: the file is written again
    fs, root = fsspec.core.url_to_fs("memory://parity-logging-csv")
    assert logger.log_dir == "memory://parity-logging-csv/logs/version_0"
    with fs.open(f"{root}/logs/version_0/metrics.csv", "r") as file:
        assert file.read().splitlines() == ["step,loss,acc", "0,0.5,", "1,0.25,1.0"]
    assert fs.isfile(f"{root}/logs/version_0/hparams.json")
    assert CSVLogger("memory://parity-logging-csv").version == 1
    fs.rm(root, recursive=True)
