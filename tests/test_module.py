"""The Module and DataModule contract: the order of hooks, what ``self.log`` keeps, what ``configure_optimizers``
may return, hyperparameters, manual optimization, and the Trainer flags that shape the loops."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback
from core.module._optimizers import parse_optimizers
from core.trainer._data import ShardSampler


def loader(samples: int, batch_size: int = 2, seed: int = 0) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(samples, 3, generator=generator)), batch_size=batch_size)


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val", self.layer(batch[0]).mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(**flags: Any) -> core.Trainer:
    defaults: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "num_sanity_val_steps": 0}
    return core.Trainer(**{**defaults, **flags})


# -------------------------------------------------------------------------------------------------
# Order of hooks
# -------------------------------------------------------------------------------------------------

MODULE_HOOKS = [
    "prepare_data", "setup", "teardown", "configure_optimizers", "training_step", "validation_step",
    *(name for name in vars(core.Module) if name.startswith("on_")),
]
CALLBACK_HOOKS = [name for name in vars(Callback) if name.startswith("on_") or name in ("setup", "teardown")]


def recording(base: type, names: list[str], calls: list[str], prefix: str) -> type:
    """A subclass of ``base`` whose methods ``names`` append ``prefix + name`` to ``calls`` first."""

    def wrap(name: str) -> Any:
        original = getattr(base, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(prefix + name)
            return original(self, *args, **kwargs)

        return method

    return type(f"Recording{base.__name__}", (base,), {name: wrap(name) for name in names})


# Lightning's order: the callbacks' hook first, then the Module's (on_train_epoch_end: the Module's between the
# ordinary callbacks' and those of EarlyStopping / ModelCheckpoint). The batch transfer hooks run before the
# batch-start hooks, and the *_model_eval/train hooks around the whole evaluation.
VALIDATION = [
    "M.on_validation_model_eval",
    "C.on_validation_start", "M.on_validation_start", "C.on_validation_epoch_start", "M.on_validation_epoch_start",
    "M.on_before_batch_transfer", "M.on_after_batch_transfer",
    "C.on_validation_batch_start", "M.on_validation_batch_start", "M.validation_step",
    "C.on_validation_batch_end", "M.on_validation_batch_end",
    "C.on_validation_epoch_end", "M.on_validation_epoch_end", "C.on_validation_end", "M.on_validation_end",
    "M.on_validation_model_train",
]
TRAINING_BATCH = [
    "M.on_before_batch_transfer", "M.on_after_batch_transfer",
    "C.on_train_batch_start", "M.on_train_batch_start",
    "C.on_before_zero_grad", "M.on_before_zero_grad",
    "M.training_step",  # after zero_grad: Lightning zeroes between the step and the backward (migrating guide)
    "C.on_before_backward", "M.on_before_backward", "C.on_after_backward", "M.on_after_backward",
    "C.on_before_optimizer_step", "M.on_before_optimizer_step",
    "C.on_train_batch_end", "M.on_train_batch_end",
]


def test_fit_calls_the_hooks_in_the_documented_order() -> None:
    calls: list[str] = []
    module = recording(Tiny, MODULE_HOOKS, calls, "M.")()
    callback = recording(Callback, CALLBACK_HOOKS, calls, "C.")()
    trainer(max_epochs=1, num_sanity_val_steps=1, callbacks=[callback]).fit(module, loader(4), loader(2))

    assert calls == [
        "M.prepare_data", "C.setup", "M.setup", "M.configure_optimizers",
        "C.on_fit_start", "M.on_fit_start",
        "C.on_sanity_check_start", *VALIDATION, "C.on_sanity_check_end",
        "C.on_train_start", "M.on_train_start",
        "C.on_train_epoch_start", "M.on_train_epoch_start",
        *TRAINING_BATCH, *TRAINING_BATCH, "M.on_validation_model_zero_grad", *VALIDATION,
        "C.on_train_epoch_end", "M.on_train_epoch_end",
        "C.on_train_end", "M.on_train_end", "C.on_fit_end", "M.on_fit_end",
        "C.teardown", "M.teardown",
    ]


def test_a_failing_step_reaches_on_exception_and_teardown() -> None:
    calls: list[str] = []

    class Failing(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise RuntimeError("boom")

        def teardown(self, stage: str) -> None:
            calls.append(f"teardown {stage}")

    class Watcher(Callback):
        def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
            calls.append(f"exception {exception}")

    with pytest.raises(RuntimeError, match="boom"):
        trainer(max_epochs=1, callbacks=[Watcher()]).fit(Failing(), loader(4))
    assert calls == ["exception boom", "teardown fit"]


# -------------------------------------------------------------------------------------------------
# self.log
# -------------------------------------------------------------------------------------------------


class Logging(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("plain", float(batch_idx))
        self.log("both", float(batch_idx), on_epoch=True)
        self.log("total", 1.0, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("peak", float(batch_idx), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("weighted", float(batch_idx), on_step=False, on_epoch=True, batch_size=batch_idx + 1)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_mean", batch[0][:, 0].mean())  # weighted by each batch's size


def test_log_defaults_suffixes_and_reductions() -> None:
    run = trainer(max_epochs=1)
    validation = loader(5, batch_size=2, seed=3)  # batches of 2, 2 and 1
    run.fit(Logging(), loader(6), validation)
    metrics = run.callback_metrics

    assert "plain" in metrics and "plain_epoch" not in metrics and float(metrics["plain"]) == 2.0
    assert float(metrics["both_step"]) == 2.0 and float(metrics["both_epoch"]) == pytest.approx(1.0)
    assert float(metrics["total"]) == 3.0 and float(metrics["peak"]) == 2.0
    assert float(metrics["weighted"]) == pytest.approx((0 * 1 + 1 * 2 + 2 * 3) / 6)
    every_sample = validation.dataset.tensors[0][:, 0].double().mean()  # type: ignore[attr-defined]
    assert float(metrics["val_mean"]) == pytest.approx(float(every_sample), abs=1e-7)


@pytest.mark.parametrize(
    ("value", "options", "message"),
    [
        (torch.ones(2), {}, r"tensor of shape \(2,\)"),
        ("high", {}, "expected a number, a one-element tensor or a torchmetrics.Metric"),
        (1.0, {"reduce_fx": "median"}, "reduce_fx='median'"),
        (1.0, {"on_step": False, "on_epoch": False}, "keeps nothing"),
        (1.0, {"rank_zero_only": True, "sync_dist": True}, "cannot be reduced across processes"),
    ],
)
def test_log_refuses_what_it_cannot_keep(value: Any, options: dict[str, Any], message: str) -> None:
    class Bad(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("x", value, **options)
            return super().training_step(batch, batch_idx)

    with pytest.raises(core.ConfigurationError, match=message):
        trainer(max_epochs=1).fit(Bad(), loader(2))


def test_log_outside_a_run_warns_and_does_nothing() -> None:
    with pytest.warns(core.CoreWarning, match="outside a Trainer run does nothing"):
        Tiny().log("alone", 1.0)


# -------------------------------------------------------------------------------------------------
# configure_optimizers
# -------------------------------------------------------------------------------------------------


def test_every_documented_return_shape_of_configure_optimizers_is_read() -> None:
    parameters = [torch.nn.Parameter(torch.zeros(1))]
    first, second = torch.optim.SGD(parameters, lr=1.0), torch.optim.Adam(parameters)
    step_lr = torch.optim.lr_scheduler.StepLR(first, 1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(second)

    assert parse_optimizers(first) == ([first], [])
    assert parse_optimizers([first, second]) == ([first, second], [])
    optimizers, schedulers = parse_optimizers(([first], [step_lr]))
    assert optimizers == [first] and [(s.scheduler, s.interval) for s in schedulers] == [(step_lr, "epoch")]
    optimizers, schedulers = parse_optimizers(
        {"optimizer": first, "lr_scheduler": {"scheduler": step_lr, "interval": "step", "frequency": 3}}
    )
    assert [(s.interval, s.frequency) for s in schedulers] == [("step", 3)]
    optimizers, schedulers = parse_optimizers([{"optimizer": first}, {"optimizer": second, "lr_scheduler": plateau,
                                                                      "monitor": "val_loss"}])
    assert optimizers == [first, second] and schedulers[0].monitor == "val_loss"


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("adam", "configure_optimizers returned 'adam'"),
        ({"optimiser": None}, "it needs 'optimizer'"),
        ({"optimizer": None}, "with torch.optim.Optimizer objects"),
        ("plateau", "ReduceLROnPlateau needs the metric it watches"),
        ("interval", "interval='hourly'"),
        ("frequency", r"lr_scheduler frequency=True: expected a whole number >= 1"),
    ],
)
def test_wrong_returns_of_configure_optimizers_are_explained(returned: Any, message: str) -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    if returned == "plateau":
        returned = {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)}
    elif returned == "interval":
        returned = {"optimizer": optimizer, "lr_scheduler": {
            "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1), "interval": "hourly"}}
    elif returned == "frequency":  # True is an int to Python, never a count
        returned = {"optimizer": optimizer, "lr_scheduler": {
            "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1), "frequency": True}}
    with pytest.raises(core.ConfigurationError, match=message):
        parse_optimizers(returned)


def test_reduce_on_plateau_watches_a_logged_metric() -> None:
    class Plateau(Tiny):
        def on_train_epoch_end(self) -> None:
            self.log("flat", 1.0)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "flat"}}

    run = trainer(max_epochs=3)
    run.fit(Plateau(), loader(2))
    assert run.optimizers[0].param_groups[0]["lr"] == 0.25  # no improvement after the first epoch: halved twice


# -------------------------------------------------------------------------------------------------
# Hyperparameters, DataModule, manual optimization, predict
# -------------------------------------------------------------------------------------------------


def test_save_hyperparameters_takes_init_arguments_names_or_a_mapping(tmp_path: Path) -> None:
    class Configured(Tiny):
        def __init__(self, lr: float = 0.1, layers: int = 2, *, data: object = None, **extra: Any) -> None:
            super().__init__()
            self.save_hyperparameters(ignore="data")

    assert Configured(0.5, tag="x").hparams == {"lr": 0.5, "layers": 2, "tag": "x"}
    assert Configured(layers=3).hparams.layers == 3

    class Chosen(Tiny):
        def __init__(self, lr: float = 0.1, layers: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters("lr")

    assert Chosen().hparams == {"lr": 0.1}

    class FromNamespace(Tiny):
        def __init__(self, args: argparse.Namespace) -> None:
            super().__init__()
            self.save_hyperparameters(args)

    assert FromNamespace(argparse.Namespace(lr=1.0, path=Path("x"))).hparams == {"lr": 1.0, "path": Path("x")}

    class Misnamed(Tiny):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters("learning_rate")

    with pytest.raises(core.ConfigurationError, match=r"\['learning_rate'\] are not arguments.*\['lr'\]"):
        Misnamed()


class Data(core.DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup {stage}")

    def train_dataloader(self) -> Any:
        return loader(4)

    def val_dataloader(self) -> Any:
        return loader(2)

    def predict_dataloader(self) -> Any:
        return [loader(4), loader(2)]


def test_a_datamodule_supplies_the_data_and_is_prepared_once() -> None:
    data, run = Data(), trainer(max_epochs=1)
    run.fit(Tiny(), datamodule=data)
    assert data.calls == ["prepare_data", "setup fit"]
    assert run.num_training_batches == 2 and run.num_val_batches == [1]
    run.fit(Tiny(), train_dataloaders=loader(8), datamodule=data)  # given loaders win over the DataModule's
    assert run.num_training_batches == 4


def test_predict_returns_one_list_of_outputs_per_loader() -> None:
    class Doubling(Tiny):
        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
            return batch[0] * 2

    predictions = trainer().predict(Doubling(), datamodule=Data())
    assert [len(outputs) for outputs in predictions] == [2, 1]
    assert torch.equal(predictions[1][0], loader(2).dataset.tensors[0] * 2)  # type: ignore[attr-defined]


def test_manual_optimization_counts_every_optimizer_step() -> None:
    class Manual(Tiny):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(self.layer(batch[0]).pow(2).mean())
            if batch_idx % 2 == 0:
                optimizer.step()

    run = trainer(max_epochs=2)
    run.fit(Manual(), loader(8))  # 4 batches per epoch, a step on every other one
    assert run.global_step == 4
    with pytest.raises(core.ConfigurationError, match="cannot accumulate or clip"):
        trainer(max_epochs=1, accumulate_grad_batches=2).fit(Manual(), loader(4))


def test_under_manual_optimization_the_module_steps_its_schedulers() -> None:
    class Manual(Tiny):
        def __init__(self, step_in_epoch_end: bool) -> None:
            super().__init__()
            self.automatic_optimization, self.step_in_epoch_end = False, step_in_epoch_end

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

        def training_step(self, batch: Any, batch_idx: int) -> None:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(self.layer(batch[0]).pow(2).mean())
            optimizer.step()

        def on_train_epoch_end(self) -> None:
            if self.step_in_epoch_end:
                self.lr_schedulers().step()

    for step_in_epoch_end, stepped in ((False, 0), (True, 3)):
        run = trainer(max_epochs=3)
        run.fit(Manual(step_in_epoch_end), loader(4))
        assert run.lr_scheduler_configs[0].scheduler.last_epoch == stepped  # the Trainer never steps them


def test_a_training_step_returning_none_skips_the_optimizer_step() -> None:
    class Skipping(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None if batch_idx == 1 else super().training_step(batch, batch_idx)

    run = trainer(max_epochs=1)
    run.fit(Skipping(), loader(6))
    assert run.global_step == 2


# -------------------------------------------------------------------------------------------------
# Loop flags
# -------------------------------------------------------------------------------------------------


class CountingValidation(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.validated_at: list[tuple[int, int]] = []

    def on_validation_start(self) -> None:
        self.validated_at.append((self.current_epoch, self.trainer.batches_done))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, [(0, 4), (1, 4)]),
        ({"val_check_interval": 0.5}, [(0, 2), (0, 4), (1, 2), (1, 4)]),
        ({"val_check_interval": 3, "check_val_every_n_epoch": None}, [(0, 3), (1, 2)]),
        ({"check_val_every_n_epoch": 2}, [(1, 4)]),
        ({"limit_val_batches": 0}, []),
    ],
)
def test_validation_runs_where_the_flags_say(flags: dict[str, Any], expected: list[tuple[int, int]]) -> None:
    module = CountingValidation()
    trainer(max_epochs=2, **flags).fit(module, loader(8), loader(2))
    assert module.validated_at == expected


def test_limits_and_max_steps_shorten_the_loops() -> None:
    run = trainer(max_epochs=3, limit_train_batches=0.5, limit_val_batches=1)
    run.fit(Tiny(), loader(8), loader(8))
    assert run.num_training_batches == 2 and run.num_val_batches == [1] and run.global_step == 6
    run = trainer(max_steps=5)
    run.fit(Tiny(), loader(8))
    assert run.global_step == 5 and run.current_epoch == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"val_check_interval": 1.5}, "val_check_interval=1.5"),
        ({"max_steps": -2}, "`max_steps` must be a non-negative integer or -1"),
        ({"limit_train_batches": 2.0}, "limit_train_batches=2.0"),
        ({"gradient_clip_algorithm": "l1"}, "`gradient_clip_algorithm` l1 is invalid"),
        ({"check_val_every_n_epoch": None}, "check_val_every_n_epoch=None counts training batches"),
        ({"accumulate_grad_batches": 0}, "accumulate_grad_batches=0"),
    ],
)
def test_bad_trainer_flags_are_refused_with_the_flag_named(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=message):
        trainer(**flags)


def test_a_weights_only_checkpoint_cannot_resume_fit(tmp_path: Path) -> None:
    class Saving(Tiny):
        def on_train_end(self) -> None:
            self.trainer.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)

    trainer(max_epochs=1).fit(Saving(), loader(4))
    with pytest.raises(core.CheckpointError, match="saved with weights only"):
        trainer(max_epochs=2).fit(Tiny(), loader(4), ckpt_path=tmp_path / "weights.ckpt")
    results = trainer().validate(Tiny(), loader(2), ckpt_path=tmp_path / "weights.ckpt")
    assert list(results[0]) == ["val"]


# -------------------------------------------------------------------------------------------------
# Splitting evaluation data without padding
# -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "rank", "indices", "real_batches"),
    [
        (37, 0, list(range(0, 37, 2)), 3),
        (37, 1, list(range(1, 37, 2)), 3),
        (33, 0, list(range(0, 33, 2)), 3),
        (33, 1, [*range(1, 33, 2), 1], 2),  # one batch short: a filler sample makes the third batch
    ],
)
def test_evaluation_shards_cover_every_sample_once(
    length: int, rank: int, indices: list[int], real_batches: int
) -> None:
    shard = ShardSampler(length, num_replicas=2, rank=rank, batch_size=8)
    assert list(shard) == indices
    assert shard.real_batches == real_batches
