"""Lightning's defaults where a migrating program sees them, each checked against what Lightning 2.6 does.

Read from Lightning's source (Lightning-AI/pytorch-lightning, tag 2.6.5, be98784a1a03581b7051a355ae1084fd352d7cea):
- ``Trainer.enable_validation`` / ``_EvaluationLoop.setup_data``: without an overridden ``validation_step`` fit builds
  no validation loader and runs no validation (``configuration_validator`` warns when validation data was given);
  ``validate()`` / ``test()`` without the step are refused before they start.
- ``is_param_in_hook_signature(step, "batch_idx", min_args=2)`` (``training_epoch_loop._build_kwargs``,
  ``evaluation_loop._build_step_args_from_hook_kwargs``, ``prediction_loop``): ``batch_idx`` is passed when the step
  names it, takes ``*args``, or has two parameters after ``self``; ``dataloader_idx`` only with several loaders
  (``_verify_dataloader_idx_requirement`` refuses a step that does not fit the number of loaders).
- ``Trainer.save_checkpoint`` works after ``fit`` returned (the model stays attached).
- ``_LoggerConnector.configure_logger``: ``logger=True`` is a ``TensorBoardLogger(save_dir=default_root_dir)`` when
  tensorboard is importable, else a ``CSVLogger``; ``ModelCheckpoint.__resolve_ckpt_dir`` puts checkpoints in the
  first logger's ``<save_dir>/<name>/version_<n>/checkpoints``; the loggers write ``hparams.yaml`` there.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
import core.lightning as L
from core import ConfigurationError, CoreError, CoreWarning
from core.trainer import _signatures

FEATURES = 4


def data(samples: int = 32, seed: int = 0, batch_size: int = 8) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=batch_size)


def quiet(trainer_class: type[core.Trainer] = L.pytorch.Trainer, **flags: Any) -> core.Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "max_epochs": 1, "enable_progress_bar": False,
                                "enable_model_summary": False, "logger": False, "enable_checkpointing": False}
    return trainer_class(**{**settings, **flags})


class Regression(L.LightningModule):
    """Lightning's smallest module: a training step that takes only the batch (no batch_idx)."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(FEATURES, 1)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def loss(self, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def training_step(self, batch):  # type: ignore[no-untyped-def]
        self.calls.append(("training_step", ()))
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


# ------------------------------------------------------------------------------------- validation is skipped


class CountsValidationData(Regression):
    def __init__(self) -> None:
        super().__init__()
        self.val_dataloader_calls = 0
        self.validation_starts = 0

    def val_dataloader(self) -> DataLoader[Any]:
        self.val_dataloader_calls += 1
        return data(seed=1)

    def on_validation_start(self) -> None:
        self.validation_starts += 1


def test_fit_without_validation_step_skips_validation_and_never_builds_its_loader() -> None:
    module = CountsValidationData()
    trainer = quiet(max_epochs=2, num_sanity_val_steps=2)
    with pytest.warns(CoreWarning, match="does not override validation_step"):
        trainer.fit(module, data())
    assert module.val_dataloader_calls == 0 and module.validation_starts == 0
    assert trainer.num_val_batches == [] and trainer.global_step == 8
    assert "val_loss" not in trainer.callback_metrics


def test_fit_with_validation_loaders_passed_but_no_step_warns_and_trains() -> None:
    module = Regression()
    with pytest.warns(CoreWarning, match="validation loop is skipped"):
        quiet().fit(module, data(), val_dataloaders=data(seed=1))
    assert [name for name, _ in module.calls] == ["training_step"] * 4


def test_fit_without_validation_data_or_step_says_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoreWarning)
        quiet().fit(Regression(), data())


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_validate_and_test_without_their_step_are_refused_before_running(stage: str) -> None:
    class Prepared(Regression):
        def prepare_data(self) -> None:
            raise AssertionError("the refusal comes before prepare_data, as Lightning's")

    step = "validation_step" if stage == "validate" else "test_step"
    with pytest.raises(ConfigurationError, match=f"does not override: define {step}"):
        getattr(quiet(), stage)(Prepared(), data())


# ------------------------------------------------------------------------ signature-aware step arguments


class Steps(Regression):
    """Records the arguments every step receives; the signatures vary per subclass."""

    def validation_step(self, batch):  # type: ignore[no-untyped-def]
        self.calls.append(("validation_step", ()))
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch):  # type: ignore[no-untyped-def]
        self.calls.append(("test_step", ()))
        self.log("test_loss", self.loss(batch))

    def predict_step(self, batch):  # type: ignore[no-untyped-def]
        self.calls.append(("predict_step", ()))
        return self.layer(batch[0])


def test_steps_that_take_only_the_batch_run_in_every_entry_point() -> None:
    module = Steps()
    trainer = quiet(num_sanity_val_steps=0)
    trainer.fit(module, data(), val_dataloaders=data(seed=1))
    assert trainer.callback_metrics["val_loss"] > 0
    assert trainer.test(module, data(seed=2))[0]["test_loss"] > 0
    predictions = trainer.predict(module, data(seed=3))
    assert len(predictions) == 4 and predictions[0].shape == (8, 1)
    assert {name for name, _ in module.calls} == {"training_step", "validation_step", "test_step", "predict_step"}


class IndexUnderAnotherName(Regression):
    """Two parameters after self: Lightning passes batch_idx whatever its name (``min_args=2``)."""

    def training_step(self, batch, number):  # type: ignore[no-untyped-def]
        self.calls.append(("training_step", (number,)))
        return self.loss(batch)

    def validation_step(self, batch, *rest):  # type: ignore[no-untyped-def]
        self.calls.append(("validation_step", rest))


def test_batch_idx_is_passed_by_position_and_to_star_args() -> None:
    module = IndexUnderAnotherName()
    quiet(num_sanity_val_steps=0).fit(module, data(), val_dataloaders=data(seed=1, samples=16))
    assert [call for call in module.calls if call[0] == "training_step"] == [("training_step", (i,)) for i in range(4)]
    assert [call for call in module.calls if call[0] == "validation_step"] == [("validation_step", (0,)),
                                                                             ("validation_step", (1,))]


def logged(step: Any) -> Any:
    @functools.wraps(step)
    def wrapper(self: Any, *args: Any) -> Any:
        self.calls.append(("wrapper", args[1:]))
        return step(self, *args)

    return wrapper


class Decorated(Regression):
    @logged
    def training_step(self, batch):  # type: ignore[no-untyped-def]
        return self.loss(batch)


def test_a_decorated_step_is_read_through_its_wrapped_function() -> None:
    module = Decorated()
    quiet().fit(module, data())
    assert module.calls == [("wrapper", ())] * 4  # the wrapper takes *args, but the step it wraps takes no batch_idx


class SeveralLoaders(Regression):
    def __init__(self, with_index: bool) -> None:
        super().__init__()
        self.with_index = with_index

    def validation_step(self, batch, batch_idx, dataloader_idx=0):  # type: ignore[no-untyped-def]
        self.calls.append(("validation_step", (batch_idx, dataloader_idx)))


class NoLoaderIndex(Regression):
    def validation_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        self.calls.append(("validation_step", (batch_idx,)))


class RequiredLoaderIndex(Regression):
    def validation_step(self, batch, batch_idx, dataloader_idx):  # type: ignore[no-untyped-def]
        self.calls.append(("validation_step", (batch_idx, dataloader_idx)))


def test_dataloader_idx_is_passed_only_with_several_loaders() -> None:
    module = SeveralLoaders(with_index=True)
    trainer = quiet()
    trainer.validate(module, data(samples=8))
    trainer.validate(module, [data(samples=8), data(samples=16, seed=1)])
    assert [args for _, args in module.calls] == [(0, 0), (0, 0), (0, 1), (1, 1)]


def test_a_step_that_does_not_fit_the_number_of_loaders_is_refused_as_in_lightning() -> None:
    with pytest.raises(ConfigurationError, match=r"NoLoaderIndex.validation_step\(\) takes no dataloader_idx"):
        quiet().validate(NoLoaderIndex(), [data(samples=8), data(samples=8, seed=1)])
    with pytest.raises(ConfigurationError, match=r"requires dataloader_idx, but there is one val DataLoader"):
        quiet().validate(RequiredLoaderIndex(), data(samples=8))
    module = RequiredLoaderIndex()
    quiet().validate(module, [data(samples=8), data(samples=8, seed=1)])
    assert [args for _, args in module.calls] == [(0, 0), (0, 1)]


def test_the_signature_is_read_once_per_loop_not_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = inspect.getfullargspec

    def counted(function: Any) -> Any:
        reads.append(function.__name__)
        return real(function)

    monkeypatch.setattr(_signatures.inspect, "getfullargspec", counted)
    module = Steps()
    quiet(max_epochs=3, num_sanity_val_steps=0).fit(module, data(samples=64), val_dataloaders=data(seed=1))
    assert sum(name == "training_step" for name, _ in module.calls) == 24
    # One read for training_step per fit; validation_step twice (dataloader_idx, batch_idx) per validation run.
    assert reads.count("training_step") == 1
    assert reads.count("validation_step") == 3 * 2


@pytest.mark.parametrize(
    ("signature", "expected"),
    [("(self, batch)", False), ("(self, batch, batch_idx)", True), ("(self, batch, idx)", True),
     ("(self, batch, *args)", True), ("(self, *args, **kwargs)", True), ("(self, batch, **kwargs)", False),
     ("(self, batch, *, batch_idx)", False)],
)
def test_takes_batch_idx_follows_lightnings_is_param_in_hook_signature(signature: str, expected: bool) -> None:
    namespace: dict[str, Any] = {}
    exec(f"class Owner:\n    def training_step{signature}:\n        pass", namespace)
    assert _signatures.takes_batch_idx(namespace["Owner"]().training_step) is expected


# ----------------------------------------------------------------------------------- save_checkpoint after fit


class Resumable(Steps):
    def __init__(self) -> None:
        super().__init__()
        self.weights_at_start: dict[str, torch.Tensor] = {}

    def on_train_start(self) -> None:
        self.weights_at_start = {name: tensor.clone() for name, tensor in self.state_dict().items()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def test_save_checkpoint_after_fit_keeps_the_final_state_and_resumes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = Resumable()
    trainer = quiet(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(module, data(), val_dataloaders=data(seed=1))
    final = tmp_path / "final.ckpt"
    trainer.save_checkpoint(final)
    saved = torch.load(final, weights_only=True)
    assert saved["global_step"] == 8 and saved["epoch"] == 2
    for name, tensor in module.state_dict().items():
        assert torch.equal(saved["state_dict"][name], tensor)
    assert saved["optimizer_states"][0]["state"][0]["momentum_buffer"].abs().sum() > 0

    # Resume for one more epoch: the weights it starts from are the saved ones, the step count goes on.
    resumed = Resumable()
    again = quiet(max_epochs=3, num_sanity_val_steps=0)
    again.fit(resumed, data(), val_dataloaders=data(seed=1), ckpt_path=final)
    for name, tensor in module.state_dict().items():
        assert torch.equal(resumed.weights_at_start[name], tensor)
    assert again.global_step == 12 and again.current_epoch == 3
    # The same three epochs in one run end with the same weights.
    torch.manual_seed(0)
    straight = Resumable()  # the same initial weights as the first module
    quiet(max_epochs=3, num_sanity_val_steps=0).fit(straight, data(), val_dataloaders=data(seed=1))
    for name, tensor in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor)

    weights_only = tmp_path / "weights.ckpt"
    trainer.save_checkpoint(weights_only, weights_only=True)
    assert "optimizer_states" not in torch.load(weights_only, weights_only=True)
    assert quiet().validate(Resumable(), data(seed=1), ckpt_path=weights_only)[0]["val_loss"] == pytest.approx(
        trainer.validate(module, data(seed=1))[0]["val_loss"], rel=1e-6)


def test_save_checkpoint_before_any_fit_still_says_when_it_works(tmp_path: Path) -> None:
    with pytest.raises(CoreError, match="or of a fit that has returned"):
        quiet().save_checkpoint(tmp_path / "nothing.ckpt")


# --------------------------------------------------------------------------------- default logger and layout


def test_lightning_trainer_defaults_to_tensorboard_in_lightning_logs(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    module = Steps()
    trainer = L.pytorch.Trainer(accelerator="cpu", devices=1, max_epochs=2, default_root_dir=tmp_path,
                        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    assert isinstance(trainer.logger, L.pytorch.loggers.TensorBoardLogger)
    trainer.fit(module, data(), val_dataloaders=data(seed=1))
    run = tmp_path / "lightning_logs" / "version_0"
    assert trainer.log_dir == str(run)
    assert isinstance(trainer.logger.experiment, SummaryWriter)  # what programs call add_image / add_histogram on
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["epoch=1-step=8.ckpt"]
    assert trainer.checkpoint_callback is not None and trainer.checkpoint_callback.dirpath == str(run / "checkpoints")
    import yaml

    assert yaml.safe_load((run / "hparams.yaml").read_text()) == {"lr": 0.05}
    events = EventAccumulator(str(run))
    events.Reload()
    assert [event.step for event in events.Scalars("train_loss")] == list(range(8))  # Lightning's numbering
    assert events.Scalars("val_loss")[-1].value == pytest.approx(float(trainer.callback_metrics["val_loss"]))
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()

    second = L.pytorch.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path,
                       enable_progress_bar=False, enable_model_summary=False)
    second.fit(Steps(), data())
    assert (tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "epoch=0-step=4.ckpt").exists()


def test_lightning_layout_puts_checkpoints_under_any_first_logger(tmp_path: Path) -> None:
    logger = L.pytorch.loggers.CSVLogger(save_dir=tmp_path / "logs", name="exp", version="run-a")
    trainer = L.pytorch.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path, logger=logger,
                        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(Steps(), data())
    run = tmp_path / "logs" / "exp" / "run-a"
    assert (run / "checkpoints" / "epoch=0-step=4.ckpt").exists() and (run / "metrics.csv").exists()
    assert (run / "hparams.yaml").exists()

    no_logger = L.pytorch.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path / "bare",
                          logger=False, enable_progress_bar=False, enable_model_summary=False)
    no_logger.fit(Steps(), data())
    assert (tmp_path / "bare" / "checkpoints" / "epoch=0-step=4.ckpt").exists()


def test_without_tensorboard_the_lightning_default_is_a_csv_logger(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    # Stands in for an environment without the tensorboard package (Lightning's fallback); tensorboard itself is
    # installed here, so only the check that finds it is replaced.
    import core.lightning._trainer as lightning_trainer

    monkeypatch.setattr(lightning_trainer, "tensorboard_available", lambda: False)
    trainer = L.pytorch.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path)
    assert isinstance(trainer.logger, L.pytorch.loggers.CSVLogger)
    assert trainer.logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")


def test_the_native_trainer_keeps_its_own_layout(tmp_path: Path) -> None:
    trainer = core.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path,
                           enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    assert type(trainer.logger) is core.loggers.CSVLogger
    trainer.fit(Steps(), data())
    assert (tmp_path / "checkpoints" / "epoch=0-step=4.ckpt").exists()
    assert (tmp_path / "logs" / "version_0" / "metrics.csv").exists()
    assert (tmp_path / "logs" / "version_0" / "hparams.json").exists()
    assert not (tmp_path / "lightning_logs").exists()


def test_pl_trainer_environment_variables_are_defaults_as_in_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's _defaults_from_env_vars: PL_TRAINER_<FLAG> fills a flag the code left out, as a Python literal.
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_LIMIT_TRAIN_BATCHES", "0.5")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_NOT_A_FLAG", "1")
    trainer = L.pytorch.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, enable_checkpointing=False,
                        enable_model_summary=False)
    assert trainer.max_epochs == 3 and trainer.limit_train_batches == 0.5 and trainer.loggers == []
    assert L.pytorch.Trainer("cpu", max_epochs=1, logger=False).max_epochs == 1  # what the code passes wins
    trainer.fit(Steps(), data())
    assert trainer.global_step == 3 * 2
    assert core.Trainer(accelerator="cpu", logger=False).max_epochs != 3  # the native Trainer reads no PL_ variables


# ------------------------------------------------------------------------ EarlyStopping's check_on_train_epoch_end


class Validated(Regression):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch))


@pytest.mark.parametrize(("flags", "at_epoch_end"), [({}, True), ({"check_val_every_n_epoch": 2}, False),
                                                      ({"val_check_interval": 0.5}, False)])
def test_early_stopping_chooses_when_to_check_as_lightning(flags: dict[str, Any], at_epoch_end: bool) -> None:
    # Lightning's EarlyStopping.setup: the None default checks at the epoch's end only when validation runs once at
    # the end of every epoch, else after each validation; with validation every 2nd epoch a per-epoch check would
    # find no val_loss in the epochs without one (strict=True refuses that).
    stopping = L.pytorch.callbacks.EarlyStopping(monitor="val_loss", patience=100)
    assert stopping.check_on_train_epoch_end is None
    trainer = quiet(max_epochs=4, callbacks=[stopping], num_sanity_val_steps=0, **flags)
    trainer.fit(Validated(), data(), data(seed=1))
    assert stopping.check_on_train_epoch_end is at_epoch_end and trainer.current_epoch == 4
    assert math.isfinite(stopping.best_score)
    explicit = L.pytorch.callbacks.EarlyStopping(monitor="val_loss", check_on_train_epoch_end=False)
    quiet(callbacks=[explicit]).fit(Validated(), data(), data(seed=1))
    assert explicit.check_on_train_epoch_end is False
