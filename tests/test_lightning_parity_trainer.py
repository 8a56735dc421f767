"""The Trainer's public behaviour as Lightning 2.6 has it (issue 48): its flags' messages and errors, the INFO line
of a batch flag given as ``1`` or ``1.0``, ``trainer.state``, what an exception reaches (DataModule, strategy,
callbacks, Ctrl-C), the loaders a run read, ``overfit_batches``' sequential loaders and ``max_epochs=None``.

Read from Lightning's source (tag 2.6.5): ``trainer/setup.py`` (``_determine_batch_limits``), ``trainer/call.py``
(``_call_and_handle_interrupt``, ``_interrupt``), ``trainer/trainer.py`` (``__init__``'s checks,
``default_root_dir``, ``*_dataloader(s)``), ``loops/utilities.py`` (``_parse_loop_limits``), ``loops/fit_loop.py``
(``setup_data``) and ``trainer/connectors/data_connector.py`` (``_resolve_overfit_batches``).
"""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Any, cast
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader, Sampler, SequentialSampler, TensorDataset

import core
import core.lightning as L
from core.callbacks import Callback
from core.lightning._bases import Strategy
from core.lightning._compat import TrainerFn, TrainerState, TrainerStatus


def loader(samples: int = 8, batch_size: int = 2, sampler: Sampler[int] | None = None) -> DataLoader[Any]:
    inputs = torch.randn(samples, 3, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(inputs), batch_size=batch_size, sampler=sampler)


QUIET: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
                         "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def lightning(**flags: Any) -> Any:  # core.lightning's Trainer, with Lightning's members
    return L.Trainer(**{**QUIET, "max_epochs": 1, **flags})


def native(**flags: Any) -> core.Trainer:
    return core.Trainer(**{**QUIET, "max_epochs": 1, **flags})


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.batches: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.batches.append(batch[0])

    def test_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# --- the flags ----------------------------------------------------------------------------------------------------


def test_a_batch_flag_of_one_says_whether_it_means_one_batch_or_all(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="core"):
        lightning(limit_val_batches=1, limit_train_batches=1.0, val_check_interval=1)
    assert "`Trainer(limit_val_batches=1)` was configured so 1 batch will be used." in caplog.text
    assert "`Trainer(limit_train_batches=1.0)` was configured so 100% of the batches per epoch" in caplog.text
    assert "`Trainer(val_check_interval=1)` was configured so validation will run after every batch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="core"):
        lightning()  # not given: nothing to tell apart
        lightning(fast_dev_run=True, limit_val_batches=1)  # replaced by fast_dev_run: not read, not announced
    assert "was configured" not in caplog.text


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        ({"max_epochs": -100}, "`max_epochs` must be a non-negative integer or -1 (no limit). You passed in -100"),
        ({"max_steps": -2}, "`max_steps` must be a non-negative integer or -1 (no limit). You passed in -2"),
        ({"check_val_every_n_epoch": 1.2}, "`check_val_every_n_epoch` should be an integer, found 1.2"),
        ({"gradient_clip_algorithm": "norm2"}, "`gradient_clip_algorithm` norm2 is invalid. Allowed algorithms"),
        ({"barebones": True, "enable_checkpointing": True}, "`Trainer(barebones=True, enable_checkpointing=True)` was"),
        ({"barebones": True, "logger": True}, "`Trainer(barebones=True, logger=True)` was passed"),
        ({"barebones": True, "log_every_n_steps": 1}, "`Trainer(barebones=True, log_every_n_steps=1)` was passed"),
        ({"barebones": True, "num_sanity_val_steps": 1}, "`Trainer(barebones=True, num_sanity_val_steps=1)` was"),
        ({"barebones": True, "profiler": "simple"}, "`Trainer(barebones=True, profiler='simple')` was passed"),
    ],
)
def test_a_bad_flag_is_refused_in_lightnings_words(flags: dict[str, Any], phrase: str) -> None:
    with pytest.raises(core.ConfigurationError) as refused:
        core.Trainer(**{**QUIET, **flags})
    assert phrase in str(refused.value)


def test_barebones_keeps_log_every_n_steps_unset_and_the_clip_algorithm_is_read_in_any_case() -> None:
    assert core.Trainer(accelerator="cpu", barebones=True).log_every_n_steps == 50  # None: the default, not refused
    assert native().log_every_n_steps == 50
    assert native(gradient_clip_algorithm="VALUE").gradient_clip_algorithm == "value"


def test_a_value_of_the_wrong_type_is_a_type_error_and_a_configuration_error() -> None:
    with pytest.raises(TypeError, match=r"`gradient_clip_val` should be an int or a float. Got \(1, 2\)") as bad:
        native(gradient_clip_val=(1, 2))
    assert isinstance(bad.value, core.ConfigurationError)
    with pytest.raises(core.ConfigurationError, match="expected a number >= 0"):
        native(gradient_clip_val=-1.0)  # a number out of range stays a ValueError only
    trainer = native()
    for entry_point in (trainer.fit, trainer.validate, trainer.test, trainer.predict):
        with pytest.raises(TypeError, match=r"must be a `LightningModule`.*got `Linear`") as wrong:
            entry_point(torch.nn.Linear(2, 2))  # type: ignore[arg-type]
        assert isinstance(wrong.value, core.ConfigurationError)
    for name in ("validate", "test", "predict"):
        with pytest.raises(TypeError, match=rf"{name}\(\)` requires a `LightningModule"):
            getattr(trainer, name)()


def test_save_checkpoint_without_a_model_is_an_attribute_error(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match="only possible if a model is attached") as refused:
        native().save_checkpoint(tmp_path / "x.ckpt")
    assert isinstance(refused.value, core.CoreError)


def test_a_missing_checkpoint_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file") as missing:
        native().validate(Tiny(), loader(), ckpt_path=tmp_path / "missing.ckpt")
    assert isinstance(missing.value, core.ConfigurationError)


def test_a_val_check_interval_beyond_the_epoch_is_refused_unless_it_counts_across_epochs() -> None:
    with pytest.raises(ValueError, match="must be less than or equal to the number of the training batches"):
        native(val_check_interval=10, limit_train_batches=2).fit(Tiny(), loader(), loader())
    module = Tiny()
    native(val_check_interval=3, check_val_every_n_epoch=None, max_epochs=2).fit(module, loader(), loader())
    assert len(module.batches) == 2 * 4  # after batches 3 and 6 of 8 (4 per epoch): two validations of 4 batches


def test_default_root_dir_expands_the_home_directory() -> None:
    assert native(default_root_dir="~/runs").default_root_dir == str(Path.home() / "runs")
    assert native(default_root_dir=Path("~/runs/../x")).default_root_dir == str(Path.home() / "x")


class StopAfterOneEpoch(Callback):
    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        trainer.should_stop = True


def test_max_epochs_reads_none_until_fit_sets_1000_with_a_warning() -> None:
    trainer = lightning(max_epochs=None, callbacks=[StopAfterOneEpoch()])
    assert trainer.max_epochs is None
    with pytest.warns(core.CoreWarning, match="`max_epochs` was not set. Setting it to 1000 epochs"):
        trainer.fit(Tiny(), loader())
    assert trainer.max_epochs == 1000 and trainer.current_epoch == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stepped = lightning(max_epochs=None, max_steps=1)
        stepped.fit(Tiny(), loader())  # max_steps given: no epoch limit, nothing to warn about
    assert stepped.max_epochs == -1
    assert lightning(max_epochs=None, fast_dev_run=True).max_epochs == 1
    assert native().max_epochs == 1 and core.Trainer(accelerator="cpu", logger=False).max_epochs == 1000


# --- the loaders ----------------------------------------------------------------------------------------------------


class InOrder(Sampler[int]):
    """A sampler of the user's own: not a SequentialSampler, so overfit_batches cannot trust its order."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Any:
        return iter(range(self.length))

    def __len__(self) -> int:
        return self.length


def test_overfit_batches_reads_train_and_val_data_through_sequential_samplers() -> None:
    trainer = native(overfit_batches=2)
    with pytest.warns(core.CoreWarning, match="requested to overfit but enabled (train|val) dataloader") as seen:
        trainer.fit(Tiny(), loader(sampler=InOrder(8)), loader(sampler=InOrder(8)))
    for prefix in ("train", "val"):
        assert any(f"enabled {prefix} dataloader shuffling" in str(warning.message) for warning in seen)
    assert isinstance(trainer.train_dataloader.sampler, SequentialSampler)
    assert isinstance(trainer.val_dataloaders.sampler, SequentialSampler)


def test_the_trainer_shows_the_loaders_its_latest_runs_read() -> None:
    trainer = native()
    assert trainer.train_dataloader is None and trainer.val_dataloaders is None and trainer.test_dataloaders is None
    trainer.fit(Tiny(), loader(), [loader(), loader(samples=4)])
    assert isinstance(trainer.train_dataloader, DataLoader) and len(trainer.train_dataloader) == 4
    assert [len(one) for one in trainer.val_dataloaders] == [4, 2]
    trainer.test(Tiny(), loader(samples=2))
    assert isinstance(trainer.test_dataloaders, DataLoader) and len(trainer.test_dataloaders) == 1
    assert trainer.predict_dataloaders is None


# --- state and exceptions -------------------------------------------------------------------------------------------


def test_the_state_starts_initializing_and_equals_lightnings_record() -> None:
    trainer = lightning()
    assert trainer.state == TrainerState(status=TrainerStatus.INITIALIZING, fn=None, stage=None)
    assert trainer.state != TrainerState(status=TrainerStatus.RUNNING)
    trainer.fit(Tiny(), loader())
    assert trainer.state == TrainerState(status=TrainerStatus.FINISHED, fn=TrainerFn.FITTING, stage=None)


class Fails(Tiny):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def on_fit_start(self) -> None:
        raise self.error


class Data(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[BaseException] = []

    def train_dataloader(self) -> DataLoader[Any]:
        return loader()

    def on_exception(self, exception: BaseException) -> None:
        self.seen.append(exception)


class Seen(Callback):
    def __init__(self) -> None:
        self.seen: list[BaseException] = []

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        self.seen.append(exception)


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_exception_reaches_the_callbacks_datamodule_and_strategy_and_ctrl_c_exits_1(error: BaseException) -> None:
    callback, data = Seen(), Data()
    trainer = lightning(callbacks=[callback])
    expected = SystemExit if isinstance(error, KeyboardInterrupt) else RuntimeError
    with mock.patch.object(Strategy, "on_exception") as strategy_hook, pytest.raises(expected) as ended:
        trainer.fit(Fails(error), datamodule=data)
    if isinstance(ended.value, SystemExit):
        assert ended.value.code == 1  # Lightning's graceful shutdown: no traceback, exit status 1
    assert callback.seen == [error] and data.seen == [error]
    strategy_hook.assert_called_once_with(error)
    assert trainer.interrupted and trainer.state.status == TrainerStatus.INTERRUPTED


def test_an_exception_before_the_run_started_reaches_the_callbacks_in_this_process() -> None:
    callback = Seen()
    with pytest.raises(TypeError):
        lightning(callbacks=[callback]).fit(torch.nn.Linear(2, 2))
    assert len(callback.seen) == 1 and isinstance(callback.seen[0], TypeError)


# --- Lightning's class constants ------------------------------------------------------------------------------------


def test_lightnings_class_constants_name_what_core_writes(tmp_path: Path) -> None:
    class WithHyperparameters(Tiny):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

    trainer = lightning(max_steps=1)
    trainer.fit(WithHyperparameters(lr=0.5), loader())
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    saved = torch.load(tmp_path / "saved.ckpt", weights_only=False)
    assert saved[L.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY] == {"lr": 0.5}
    logger = L.pytorch.loggers.TensorBoardLogger(save_dir=tmp_path)
    assert logger.NAME_HPARAMS_FILE == "hparams.yaml" == type(logger).hparams_file


class Stateful(Callback):
    def state_dict(self) -> dict[str, Any]:
        return {"seen": 1}


def test_resuming_without_a_callback_whose_state_was_saved_names_it(tmp_path: Path) -> None:
    trainer = native(callbacks=[Stateful()])
    trainer.fit(Tiny(), loader())
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    with pytest.warns(core.CoreWarning, match=r"Please add the following callbacks: \['Stateful'\]"):
        native(max_epochs=2).fit(Tiny(), loader(), ckpt_path=tmp_path / "saved.ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native(max_epochs=2, callbacks=[Stateful()]).fit(Tiny(), loader(), ckpt_path=tmp_path / "saved.ckpt")


def test_the_progress_bar_counts_the_batches_of_each_epoch_as_lightnings() -> None:
    # Lightning's tests_pytorch/trainer/flags/test_check_val_every_n_epoch.py reads total_val_batches at epoch end
    seen: list[tuple[float, float]] = []

    class Totals(Tiny):
        def on_train_epoch_end(self) -> None:
            shown = cast(Any, self.trainer).progress_bar_callback  # Lightning's way to reach it
            assert shown is bar
            seen.append((bar.total_train_batches, bar.total_val_batches))

    bar = core.callbacks.ProgressBar(refresh_rate=0, stream=io.StringIO())
    trainer = native(max_epochs=4, check_val_every_n_epoch=2, limit_val_batches=2, enable_progress_bar=True,
                     callbacks=[bar])
    trainer.fit(Totals(), loader(8), loader(8))
    assert seen == [(4, 0), (4, 2), (4, 0), (4, 2)]  # validation every second epoch, 2 batches each time
    bounded = native(max_epochs=-1, max_steps=6, enable_progress_bar=True, callbacks=[bar])
    left: list[float] = []

    class StepsLeft(Tiny):
        def on_train_epoch_start(self) -> None:
            left.append(bar.total_train_batches)

    bounded.fit(StepsLeft(), loader(8))
    assert left == [4, 2]  # max_steps alone: the second epoch shows the 2 steps left, not the loader's 4


def test_configure_optimizers_returning_none_runs_the_steps_without_an_optimizer() -> None:
    class Untrained(Tiny):
        def configure_optimizers(self) -> None:
            return None

    module = Untrained()
    before = [parameter.detach().clone() for parameter in module.parameters()]
    with pytest.warns(core.CoreWarning, match="returned `None`, this fit will run with no optimizer"):
        trainer = native(max_epochs=1)
        trainer.fit(module, loader(8))
    assert trainer.global_step == 4  # every batch ran its (empty) step
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    assert repr(trainer.optimizers[0]) == "LiteOptimizer(No Optimizer)"


def test_predict_warns_once_when_predict_step_returns_none() -> None:
    class Sometimes(Tiny):
        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return None if batch_idx % 2 else batch[0]

    with pytest.warns(core.CoreWarning, match="predict returned None") as caught:
        outputs = native().predict(Sometimes(), loader(8))
    assert len([w for w in caught if "predict returned None" in str(w.message)]) == 1
    assert outputs is not None and [output is None for output in outputs] == [False, True, False, True]


def test_freeze_and_unfreeze_return_the_module() -> None:
    module = Tiny()
    assert module.freeze() is module and not module.training
    assert module.unfreeze() is module and module.training


def test_a_stop_before_min_epochs_says_so_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    class StopAtOnce(Tiny):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.trainer.should_stop = True

    trainer = native(max_epochs=10, min_epochs=3)
    with caplog.at_level(logging.INFO, logger="core"):
        trainer.fit(StopAtOnce(), loader(8))
    assert trainer.current_epoch == 3  # the minimum, then the stop
    said = [r.message for r in caplog.records if "has not been met" in r.message]
    assert said == ["Trainer was signaled to stop but the required `min_epochs=3` or `min_steps=None` has not been "
                    "met. Training will continue..."]


class WithLr(Tiny):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_load_from_checkpoint_reads_an_hparams_file_and_strict_false_loads_what_matches(tmp_path: Path) -> None:
    trainer = native(max_steps=1, default_root_dir=tmp_path)
    trainer.fit(WithLr(lr=0.001), loader(8))
    path = tmp_path / "saved.ckpt"
    trainer.save_checkpoint(path)
    assert WithLr.load_from_checkpoint(path).hparams.lr == 0.001
    files = {"hparams.yaml": "lr: 0.5\n", "hparams.json": '{"lr": 0.5}', "tags.csv": "key,value\nlr,0.5\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        assert WithLr.load_from_checkpoint(path, hparams_file=tmp_path / name).hparams.lr == 0.5  # the file wins
    assert WithLr.load_from_checkpoint(path, hparams_file=tmp_path / "tags.csv", lr=0.25).hparams.lr == 0.25
    with pytest.warns(core.CoreWarning, match=r"hparams_file=.*missing.yaml' does not exist"):
        assert WithLr.load_from_checkpoint(path, hparams_file=tmp_path / "missing.yaml").hparams.lr == 0.001
    with pytest.raises(core.ConfigurationError, match=r"expected a \.yaml, \.yml, \.json or \.csv file"):
        WithLr.load_from_checkpoint(path, hparams_file=tmp_path / "saved.ckpt")

    class Wider(WithLr):
        def __init__(self, lr: float = 0.01) -> None:
            super().__init__(lr)
            self.extra = torch.nn.Linear(2, 2)

    with pytest.raises(core.CheckpointError):
        Wider.load_from_checkpoint(path)  # strict: the extra layer is not in the checkpoint
    loaded = Wider.load_from_checkpoint(path, strict=False)
    assert torch.equal(loaded.layer.weight, WithLr.load_from_checkpoint(path).layer.weight)
