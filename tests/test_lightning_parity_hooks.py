"""The hooks as Lightning 2.6 calls them (issue 48): the order of fit / validate / test / predict, the arguments
each hook gets, what is asked for when, and the Module's Lightning helpers behind them (clip_gradients,
toggle_optimizer, manual_backward, is_overridden), with DataModule's string form."""

from __future__ import annotations

import functools
import os
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import core
from core.callbacks import Callback
from core.lightning._helpers import is_overridden  # what lightning.pytorch.utilities.model_helpers names
from core.profilers import SimpleProfiler


def loader(samples: int = 4, batch_size: int = 2) -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(samples, 3, generator=torch.Generator().manual_seed(0))),
                      batch_size=batch_size)


def trainer(**flags: Any) -> core.Trainer:
    defaults: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "enable_model_summary": False,
                                "num_sanity_val_steps": 0, "max_epochs": 1}
    return core.Trainer(**{**defaults, **flags})


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.layer(batch[0])

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self.layer(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Recorder(Callback):
    """A callback that writes ``C.<hook>(arguments after trainer and module)`` for the hooks named in ``record``."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def on_validation_batch_start(self, trainer: Any, module: Any, *args: Any) -> None:
        self.calls.append(f"C.on_validation_batch_start{len(args)}")

    def on_validation_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        self.calls.append(f"C.on_validation_batch_end{len(args)}")

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("C.on_validation_epoch_end")

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("C.on_validation_end")

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.calls.append("C.on_before_zero_grad")

    def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None:
        self.calls.append("C.on_before_backward")

    def on_after_backward(self, trainer: Any, module: Any) -> None:
        self.calls.append("C.on_after_backward")

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.calls.append("C.on_before_optimizer_step")

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        self.calls.append("C.on_train_batch_end")

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("C.on_train_end")

    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        self.calls.append(f"C.setup:{stage}")

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        self.calls.append(f"C.teardown:{stage}")


class Recorded(Tiny):
    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.calls.append("M.training_step")
        return super().training_step(batch, batch_idx)

    def on_validation_batch_start(self, *args: Any) -> None:
        self.calls.append(f"M.on_validation_batch_start{len(args)}")

    def on_validation_batch_end(self, *args: Any) -> None:
        self.calls.append(f"M.on_validation_batch_end{len(args)}")

    def on_validation_epoch_end(self) -> None:
        self.calls.append("M.on_validation_epoch_end")

    def on_validation_end(self) -> None:
        self.calls.append("M.on_validation_end")

    def on_before_zero_grad(self, optimizer: Any) -> None:
        self.calls.append("M.on_before_zero_grad")

    def on_before_backward(self, loss: Any) -> None:
        self.calls.append("M.on_before_backward")

    def on_after_backward(self) -> None:
        self.calls.append("M.on_after_backward")

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.calls.append("M.on_before_optimizer_step")

    def on_train_batch_end(self, *args: Any) -> None:
        self.calls.append("M.on_train_batch_end")

    def on_train_end(self) -> None:
        self.calls.append("M.on_train_end")

    def on_validation_model_zero_grad(self) -> None:
        self.calls.append("M.on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def setup(self, stage: str) -> None:
        self.calls.append(f"M.setup:{stage}")

    def teardown(self, stage: str) -> None:
        self.calls.append(f"M.teardown:{stage}")

    def val_dataloader(self) -> Any:
        self.calls.append("M.val_dataloader")
        return loader(2)


def test_a_training_batch_runs_the_callbacks_hook_before_the_modules() -> None:
    calls: list[str] = []
    trainer(max_steps=1, limit_val_batches=0, callbacks=[Recorder(calls)]).fit(Recorded(calls), loader(2))
    batch = calls[calls.index("C.on_before_zero_grad"):calls.index("C.on_train_end")]
    assert batch == [
        "C.on_before_zero_grad", "M.on_before_zero_grad", "M.training_step",
        "C.on_before_backward", "M.on_before_backward", "C.on_after_backward", "M.on_after_backward",
        "C.on_before_optimizer_step", "M.on_before_optimizer_step", "C.on_train_batch_end", "M.on_train_batch_end",
    ]
    assert calls[-3:] == ["M.on_train_end", "C.teardown:fit", "M.teardown:fit"]


def test_validation_hooks_run_callbacks_first_and_get_dataloader_idx_only_with_several_loaders() -> None:
    calls: list[str] = []
    trainer(callbacks=[Recorder(calls)]).validate(Recorded(calls), loader(2))
    assert calls == [
        "C.setup:validate", "M.setup:validate",
        "C.on_validation_batch_start2", "M.on_validation_batch_start2",  # batch, batch_idx: no dataloader_idx
        "C.on_validation_batch_end3", "M.on_validation_batch_end3",
        "C.on_validation_epoch_end", "M.on_validation_epoch_end", "C.on_validation_end", "M.on_validation_end",
        "C.teardown:validate", "M.teardown:validate",
    ]
    calls.clear()
    trainer(callbacks=[Recorder(calls)]).validate(Recorded(calls), [loader(2), loader(2)])
    assert calls[2:4] == ["C.on_validation_batch_start3", "M.on_validation_batch_start3"]  # with dataloader_idx


def test_fit_releases_the_gradients_before_each_validation_and_asks_for_validation_data_first() -> None:
    calls: list[str] = []

    class Data(core.DataModule):
        def train_dataloader(self) -> Any:
            calls.append("D.train_dataloader")
            return loader(4)

        def val_dataloader(self) -> Any:
            calls.append("D.val_dataloader")
            return loader(2)

    module = Recorded(calls)
    trainer(callbacks=[Recorder(calls)]).fit(module, datamodule=Data())
    assert calls.index("D.val_dataloader") < calls.index("D.train_dataloader")
    zero_grad = calls.index("M.on_validation_model_zero_grad")
    assert calls.index("M.on_train_batch_end") < zero_grad < calls.index("M.on_validation_end")
    assert all(parameter.grad is None for parameter in module.parameters())


def test_an_evaluation_with_limit_zero_asks_for_no_data_and_runs_no_hook() -> None:
    calls: list[str] = []
    result = trainer(limit_val_batches=0, callbacks=[Recorder(calls)]).validate(Recorded(calls))
    assert result == []
    assert calls == ["C.setup:validate", "M.setup:validate", "C.teardown:validate", "M.teardown:validate"]


def test_setup_and_teardown_get_stage_by_keyword_and_teardown_starts_with_the_datamodule() -> None:
    calls: list[str] = []

    class Data(core.DataModule):
        def setup(self, stage: str) -> None:
            calls.append(f"D.setup:{stage}")

        def teardown(self, stage: str) -> None:
            calls.append(f"D.teardown:{stage}")

        def predict_dataloader(self) -> Any:
            return loader(2)

    class KeywordOnly(Tiny):
        def setup(self, *, stage: str) -> None:  # type: ignore[override]  # Lightning passes stage=: this works
            calls.append(f"M.setup:{stage}")

        def teardown(self, *, stage: str) -> None:  # type: ignore[override]
            calls.append(f"M.teardown:{stage}")

    trainer(callbacks=[Recorder(calls)]).predict(KeywordOnly(), datamodule=Data())
    assert calls == ["D.setup:predict", "C.setup:predict", "M.setup:predict",
                     "D.teardown:predict", "C.teardown:predict", "M.teardown:predict"]


def test_each_stage_starts_with_the_gradients_released() -> None:
    module = Tiny()
    for parameter in module.parameters():
        parameter.grad = torch.ones_like(parameter)
    seen: list[bool] = []

    class Watch(Callback):
        def on_validation_start(self, trainer: Any, module: Any) -> None:
            seen.extend(parameter.grad is None for parameter in module.parameters())

    trainer(callbacks=[Watch()]).validate(module, loader(2))
    assert seen == [True, True]


def test_manual_backward_runs_the_backward_hooks_and_a_manual_step_the_before_step_hooks() -> None:
    calls: list[str] = []

    class Manual(Recorded):
        def __init__(self) -> None:
            super().__init__(calls)
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(self.layer(batch[0]).pow(2).mean())
            optimizer.step()
            return None

        def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            calls.append("M.backward")
            super().backward(loss, *args, **kwargs)

    trainer(max_steps=1, limit_val_batches=0, callbacks=[Recorder(calls)]).fit(Manual(), loader(2))
    assert calls[2:10] == [
        "C.on_before_backward", "M.on_before_backward", "M.backward", "C.on_after_backward", "M.on_after_backward",
        "C.on_before_optimizer_step", "M.on_before_optimizer_step", "C.on_train_batch_end",
    ]


def test_toggle_optimizer_leaves_parameters_of_no_optimizer_alone_and_untoggle_restores() -> None:
    seen: list[tuple[bool, bool, bool]] = []

    class Two(Tiny):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
            self.second.bias.requires_grad = False
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            first, _ = self.optimizers()
            self.toggle_optimizer(first)
            seen.append((self.first.weight.requires_grad, self.second.weight.requires_grad,
                         self.layer.weight.requires_grad))
            loss = self.layer(self.first(batch[0])).pow(2).mean()
            first.zero_grad()
            self.manual_backward(loss)
            first.step()
            self.untoggle_optimizer(first)
            seen.append((self.first.weight.requires_grad, self.second.weight.requires_grad,
                         self.second.bias.requires_grad))
            return None

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.first.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)]

    trainer(max_steps=1, limit_val_batches=0).fit(Two(), loader(2))
    # toggled: first trains, second does not, the layer no optimizer holds keeps requiring gradients
    assert seen == [(True, False, True), (True, True, False)]


def test_clip_gradients_follows_the_trainers_flags_and_refuses_a_contradicting_value() -> None:
    norms: list[float] = []

    class Clipped(Tiny):
        def on_before_optimizer_step(self, optimizer: Any) -> None:
            for parameter in self.parameters():
                assert parameter.grad is not None
                parameter.grad.mul_(1000)

        def on_train_batch_end(self, *args: Any) -> None:
            pass

        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            norms.append(max(float(p.grad.abs().max()) for p in self.parameters() if p.grad is not None))

    trainer(max_steps=1, limit_val_batches=0, gradient_clip_val=0.01,
            gradient_clip_algorithm="value").fit(Clipped(), loader(2))
    assert norms == [pytest.approx(0.01)]  # the default configure_gradient_clipping clipped by the Trainer's value

    class Contradicts(Tiny):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            self.clip_gradients(optimizer, gradient_clip_val=0.5)

    with pytest.raises(core.ConfigurationError, match=r"gradient_clip_val=0.01\)` and have passed `clip_gradients"):
        trainer(max_steps=1, limit_val_batches=0, gradient_clip_val=0.01).fit(Contradicts(), loader(2))

    class UnknownAlgorithm(Tiny):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            self.clip_gradients(optimizer, gradient_clip_algorithm="l1")

    with pytest.raises(core.ConfigurationError, match="'norm' and 'value'"):
        trainer(max_steps=1, limit_val_batches=0).fit(UnknownAlgorithm(), loader(2))


def test_is_overridden_looks_through_wrappers_and_a_hook_set_to_none_is_not_defined() -> None:
    module = Tiny()
    assert is_overridden("training_step", module)
    assert not is_overridden("on_train_start", module)
    module.on_train_start = functools.partial(core.Module.on_train_start, module)  # type: ignore[method-assign]
    assert not is_overridden("on_train_start", module)  # a partial of the base method: still the base's
    module.training_step = mock.Mock(wraps=module.training_step)  # type: ignore[method-assign]
    assert is_overridden("training_step", module)
    module.validation_step = None  # type: ignore[assignment,method-assign]
    assert not is_overridden("validation_step", module)


class _Endless(IterableDataset[torch.Tensor]):
    def __iter__(self) -> Any:
        yield torch.zeros(1)


def test_a_datamodule_prints_the_size_of_each_stages_data() -> None:
    class Data(core.DataModule):
        def setup(self, stage: str) -> None:
            self.train = TensorDataset(torch.zeros(64, 1))

        def train_dataloader(self) -> Any:
            return DataLoader(self.train)

        def val_dataloader(self) -> Any:
            return [DataLoader(TensorDataset(torch.zeros(16, 1))), DataLoader(_Endless())]

        def test_dataloader(self) -> Any:
            raise RuntimeError("no test data")

    data = Data()
    assert str(data).splitlines()[0] == "{Train dataloader: None}"  # not set up yet: the method raises
    data.setup("fit")
    assert str(data) == os.linesep.join([
        "{Train dataloader: size=64}", "{Validation dataloader: 1. size=16 ; 2. size=NA}",
        "{Test dataloader: None}", "{Predict dataloader: None}",
    ])


def test_the_module_keeps_its_trainer_after_fit_but_is_no_longer_running() -> None:
    module = Tiny()
    fitted = trainer(max_steps=1, limit_val_batches=0)
    fitted.fit(module, loader(2))
    assert module.trainer is fitted  # as in Lightning: model.trainer and model.optimizers() still answer
    assert module.optimizers() is fitted.optimizers[0]
    assert not module.attached and module.device == torch.device("cpu")
    with pytest.warns(core.CoreWarning, match="outside a Trainer run does nothing"):
        module.log("after_fit", 1.0)
    again = trainer(limit_val_batches=0)
    again.predict(module, loader(2))
    assert module.trainer is again  # the next Trainer takes it


def test_a_profiler_times_the_datamodules_hooks_under_lightnings_names() -> None:
    class Data(core.DataModule):
        def prepare_data(self) -> None:
            pass

        def train_dataloader(self) -> Any:
            return loader(2)

    data = Data()
    profiler = SimpleProfiler()
    trainer(max_steps=1, limit_val_batches=0, profiler=profiler).fit(Tiny(), datamodule=data)
    for hook in ("prepare_data", "setup", "teardown"):
        assert len(profiler.recorded_durations[f"[LightningDataModule]Data.{hook}"]) == 1
    assert "setup" not in vars(data)  # the timed hooks were the run's only


def test_a_module_attached_to_a_trainer_can_be_scripted() -> None:
    module = Tiny()
    module.trainer = trainer()
    scripted = torch.jit.script(module)
    inputs = torch.randn(2, 3)
    torch.testing.assert_close(scripted.layer(inputs), module.layer(inputs))


def test_grad_clip_algorithm_type_is_lightnings_enum_and_clip_gradients_takes_it() -> None:
    from core.lightning.pytorch.utilities import GradClipAlgorithmType

    assert GradClipAlgorithmType("value") is GradClipAlgorithmType.VALUE and GradClipAlgorithmType.NORM == "NORM"
    assert GradClipAlgorithmType.supported_types() == ["value", "norm"]
    largest: list[float] = []

    class ByValue(Tiny):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            for parameter in self.parameters():
                assert parameter.grad is not None
                parameter.grad.fill_(5.0)
            self.clip_gradients(optimizer, gradient_clip_val=0.1, gradient_clip_algorithm=GradClipAlgorithmType.VALUE)
            largest.append(max(float(p.grad.abs().max()) for p in self.parameters() if p.grad is not None))

    trainer(max_steps=1, limit_val_batches=0).fit(ByValue(), loader(2))
    assert largest == [pytest.approx(0.1)]
