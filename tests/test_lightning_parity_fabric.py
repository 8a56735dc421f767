"""Fabric's public behaviour on Lite, as Lightning 2.6's tests_fabric (test_fabric.py, utilities/test_data.py) say.

Found by running Lightning's tests against ``core.lightning`` (scripts/lightning_tests.py); CI has no Lightning
checkout, so each behaviour is said here in this project's words. Errors stay core's types: a wrong argument type is
a :class:`core.ConfigurationError` that is also the ``TypeError`` Fabric raises, a repeated setup a
``ConfigurationError`` (a ``ValueError``, as Fabric's).
"""

from __future__ import annotations

import importlib
from typing import Any, cast
from unittest.mock import Mock

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import core


def _loader(length: int) -> DataLoader[Any]:
    """A DataLoader over ``range(length)`` (a sequence DataLoader takes, though typed as a Dataset)."""
    return DataLoader(cast(Any, range(length)))


def _fabric_data(name: str) -> Any:
    return getattr(importlib.import_module("core.lightning.fabric.utilities.data"), name)


def test_each_object_is_set_up_once_and_a_second_setup_says_which_method() -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    model = torch.nn.Linear(1, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    set_up_model, set_up_optimizer = lite.setup(model, optimizer)

    with pytest.raises(core.ConfigurationError, match="A model should be passed only once to the `setup` method"):
        lite.setup(set_up_model, optimizer)
    with pytest.raises(ValueError, match="An optimizer should be passed only once to the `setup` method"):
        lite.setup(model, set_up_optimizer)
    with pytest.raises(ValueError, match="A model should be passed only once to the `setup_module` method"):
        lite.setup_module(set_up_model)
    with pytest.raises(ValueError, match="An optimizer should be passed only once to the `setup_optimizers` method"):
        lite.setup_optimizers(set_up_optimizer)
    loader = lite.setup_dataloaders(_loader(2))
    with pytest.raises(ValueError, match="A dataloader should be passed only once to the `setup_dataloaders`"):
        lite.setup_dataloaders(loader)  # type: ignore[call-overload]


def test_nothing_to_set_up_or_a_wrong_type_is_refused_before_any_work() -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    with pytest.raises(core.ConfigurationError, match="`setup_dataloaders` requires at least one dataloader"):
        lite.setup_dataloaders()  # type: ignore[call-overload]
    with pytest.raises(core.ConfigurationError, match="`setup_optimizers` requires at least one optimizer"):
        lite.setup_optimizers()  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="Only PyTorch DataLoader are currently supported") as refused:
        lite.setup_dataloaders(_loader(2), range(2))  # type: ignore[call-overload]
    assert isinstance(refused.value, core.ConfigurationError) and "got range" in str(refused.value)
    with pytest.raises(TypeError, match=r"setup\(\) takes torch.optim.Optimizer objects, got str"):
        lite.setup(torch.nn.Linear(1, 1), "adam")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"setup_module\(\) takes a torch.nn.Module, got list"):
        lite.setup_module([])  # type: ignore[arg-type]


def test_a_set_up_dataloader_says_where_its_batches_go() -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    moving, staying = lite.setup_dataloaders(_loader(4), _loader(4))
    assert moving.device == lite.device == torch.device("cpu")
    assert lite.setup_dataloaders(_loader(4), move_to_device=False).device is None
    assert list(staying) == [torch.tensor([i]) for i in range(4)]


def test_launch_refuses_what_it_cannot_call_with_the_lite() -> None:
    def no_parameters() -> None:
        pass

    with pytest.raises(TypeError, match="needs to take at least one argument") as refused:
        core.Lite(accelerator="cpu").launch(no_parameters)
    assert isinstance(refused.value, core.ConfigurationError) and "def no_parameters(lite)" in str(refused.value)

    called = []

    def train(lite: core.Lite) -> None:
        called.append(lite)

    # The common mistake: launch(train(lite)) passes train's result (None), which is not "no function".
    with pytest.raises(TypeError, match=r"needs to be a callable.*not .launch\(train\(\)\)"):
        core.Lite(accelerator="cpu").launch(None)  # type: ignore[call-overload]
    lite = core.Lite(accelerator="cpu")
    lite.launch(train)
    assert called == [lite]


def test_call_skips_attributes_that_are_not_methods_with_a_warning() -> None:
    called = Mock()
    not_a_method = Mock(on_train_end=1)
    lite = core.Lite(accelerator="cpu", callbacks=[not_a_method, called])
    with pytest.warns(core.CoreWarning, match="Skipping the callback `Mock.on_train_end` because it is not callable"):
        lite.call("on_train_end")
    called.on_train_end.assert_called_once_with()


def test_call_passes_each_callback_only_the_keyword_arguments_it_takes() -> None:
    class Epoch:
        def on_train_epoch_end(self, epoch: int) -> None:
            self.seen = epoch

    class Everything:
        def on_train_epoch_end(self, epoch: int, **kwargs: Any) -> None:
            self.seen = (epoch, kwargs)

    class Nothing:
        def on_train_epoch_end(self) -> None:
            self.seen = True

    epoch, everything, nothing = Epoch(), Everything(), Nothing()
    core.Lite(accelerator="cpu", callbacks=[epoch, everything, nothing]).call(
        "on_train_epoch_end", epoch=5, loss=0.1, metrics={"acc": 0.9}
    )
    assert epoch.seen == 5
    assert everything.seen == (5, {"loss": 0.1, "metrics": {"acc": 0.9}})
    assert nothing.seen is True


def test_log_sends_numbers_and_the_given_step_to_every_logger_by_keyword() -> None:
    first, second = Mock(), Mock()
    lite = core.Lite(accelerator="cpu", loggers=[first, second])
    lite.log("loss", torch.tensor([2.0]))
    for logger in (first, second):
        logger.log_metrics.assert_called_with(metrics={"loss": 2.0}, step=None)
    lite.log_dict({"loss": torch.tensor(1), "parts": {"a": torch.tensor(0.5)}}, step=15)
    first.log_metrics.assert_called_with(metrics={"loss": 1, "parts": {"a": 0.5}}, step=15)
    with pytest.raises(core.ConfigurationError, match=r"cannot be converted to a scalar.*its shape is \(2,\)"):
        lite.log("loss", torch.tensor([3, 4]))


def test_fabric_data_utilities_answer_about_lengths_and_iterable_datasets() -> None:
    has_len, sized_len, has_iterable_dataset = (
        _fabric_data("has_len"), _fabric_data("sized_len"), _fabric_data("has_iterable_dataset")
    )

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Any:
            yield from range(3)

    class SizedStream(Stream):
        def __len__(self) -> int:
            return 3

    assert has_len(_loader(3)) and sized_len(_loader(3)) == 3
    assert not has_len(DataLoader(Stream())) and sized_len(DataLoader(Stream())) is None
    with pytest.warns(core.CoreWarning, match="`DataLoader` returned 0 length"):
        assert has_len(_loader(0))
    with pytest.warns(core.CoreWarning, match="Your `IterableDataset` has `__len__` defined"):
        assert has_len(DataLoader(SizedStream()))
    assert has_iterable_dataset(DataLoader(Stream())) and not has_iterable_dataset(_loader(3))
    assert not has_iterable_dataset(object())


def test_suggested_max_num_workers_leaves_a_cpu_for_each_process(monkeypatch: pytest.MonkeyPatch) -> None:
    suggested = _fabric_data("suggested_max_num_workers")
    assert suggested is importlib.import_module("core.lightning.pytorch.utilities").suggested_max_num_workers
    monkeypatch.delattr("os.sched_getaffinity", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert [suggested(n) for n in (1, 2, 4, 8)] == [7, 3, 1, 1]
    for invalid in (0, -1):
        with pytest.raises(ValueError, match="`local_world_size` should be >= 1"):
            suggested(invalid)


def test_attribute_dict_reads_writes_and_deletes_keys_as_attributes() -> None:
    AttributeDict = _fabric_data("AttributeDict")
    state = AttributeDict(step=1)
    state.step += 1
    assert state == {"step": 2}
    with pytest.raises(AttributeError, match="'AttributeDict' object has no attribute 'epoch'"):
        _ = state.epoch
    del state.step
    assert "step" not in state
    with pytest.raises(KeyError):
        del state.step


def test_save_refuses_a_filter_that_is_not_a_dict_of_functions_over_state_keys(tmp_path: Any) -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    state = {"model": lite.setup(torch.nn.Linear(1, 1)), "step": 1}
    path = tmp_path / "state.ckpt"
    with pytest.raises(TypeError, match="Filter should be a dictionary, given 'model'") as refused:
        lite.save(path, state, filter="model")  # type: ignore[arg-type]
    assert isinstance(refused.value, core.ConfigurationError)
    with pytest.raises(TypeError, match="for key 'model' to be a callable, given 'weight'"):
        lite.save(path, state, filter={"model": "weight"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"keys \{'optimizer'\} are not present in the state keys"):
        lite.save(path, state, filter={"optimizer": lambda name, value: True})
    with pytest.raises(core.ConfigurationError, match="applies to 'step', but its value is a int, not a state dict"):
        lite.save(path, state, filter={"step": lambda name, value: True})  # Fabric saves the int whole (a difference)
    assert not path.exists()
    lite.save(path, state, filter={"model": lambda name, value: name == "weight"})
    assert set(lite.load(path)["model"]) == {"weight"}
