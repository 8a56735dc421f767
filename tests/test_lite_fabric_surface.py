"""Fabric's names on Lite: callbacks= with call(), loggers= with log()/log_dict(), load_raw, init_tensor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core.loggers import Logger


class Recording(Logger):
    def __init__(self, root: Path) -> None:
        super().__init__(root, "recording")
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))


class Hooks:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_epoch(self, epoch: int, loss: float = 0.0) -> None:
        self.seen.append(("on_epoch", (epoch, loss)))


def test_call_reaches_every_callback_that_has_the_method_in_order() -> None:
    first, second = Hooks(), Hooks()
    lite = core.Lite(accelerator="cpu", callbacks=[first, object(), second])
    lite.call("on_epoch", 3, loss=0.5)
    lite.call("a_hook_nobody_has")
    assert first.seen == second.seen == [("on_epoch", (3, 0.5))]
    assert lite.callbacks[0] is first

    class Broken:
        on_epoch = 5

    with pytest.warns(core.CoreWarning, match=r"Skipping the callback `Broken.on_epoch` because it is not callable"):
        core.Lite(accelerator="cpu", callbacks=[Broken(), first]).call("on_epoch", 1)
    assert first.seen[-1] == ("on_epoch", (1, 0.0))  # the callbacks after it are still called


def test_log_and_log_dict_reach_every_logger_with_numbers(tmp_path: Path) -> None:
    one, two = Recording(tmp_path), Recording(tmp_path)

    def run(lite: core.Lite) -> None:
        lite.log("loss", torch.tensor(0.25))
        lite.log_dict({"loss": 0.125, "accuracy": torch.tensor(0.5)}, step=10)
        lite.log("loss", 0.0625)

    lite = core.Lite(accelerator="cpu", loggers=[one, two])
    lite.launch(run)
    # step=None goes on to the logger as it is, as Fabric passes it (core's CSVLogger numbers such a row itself)
    assert one.rows == two.rows == [
        (None, {"loss": 0.25}), (10, {"loss": 0.125, "accuracy": 0.5}), (None, {"loss": 0.0625})
    ]
    assert lite.logger is one and lite.loggers == [one, two]
    assert core.Lite(accelerator="cpu").logger is None


def test_load_raw_loads_a_plain_state_dict_into_a_set_up_module(tmp_path: Path) -> None:
    source = torch.nn.Linear(3, 2)
    torch.save(source.state_dict(), tmp_path / "weights.pt")

    def run(lite: core.Lite) -> None:
        model = lite.setup(torch.nn.Linear(3, 2))
        lite.load_raw(tmp_path / "weights.pt", model)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values(),
                                                     strict=True))
        with pytest.raises(core.CheckpointError, match=r"tensor\(s\) of another shape: weight: checkpoint \(2, 3\)"):
            lite.load_raw(tmp_path / "weights.pt", lite.setup(torch.nn.Linear(4, 2)))

    core.Lite(accelerator="cpu").launch(run)


class TrustedStateDict(dict[str, torch.Tensor]):
    """A state dict of a class of the program's own: torch's weights_only unpickler refuses it."""


def test_load_raw_refuses_arbitrary_objects_unless_weights_only_is_false(tmp_path: Path) -> None:
    source = torch.nn.Linear(3, 2)
    torch.save(TrustedStateDict(source.state_dict()), tmp_path / "trusted.pt")

    def run(lite: core.Lite) -> None:
        model = lite.setup(torch.nn.Linear(3, 2))
        for refusing in ({}, {"weights_only": None}, {"weights_only": True}):
            with pytest.raises(core.CheckpointError, match="If you trust the file, load it with weights_only=False"):
                lite.load_raw(tmp_path / "trusted.pt", model, **refusing)
        lite.load_raw(tmp_path / "trusted.pt", model, weights_only=False)  # Lightning's keyword, a trusted file
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values(),
                                                     strict=True))

    core.Lite(accelerator="cpu").launch(run)


def test_init_tensor_and_the_plugin_properties() -> None:
    def run(lite: core.Lite) -> None:
        with lite.init_tensor():
            created = torch.zeros(2)
        assert created.dtype == torch.bfloat16 and created.device == lite.device
        assert lite.strategy is lite.active.strategy and lite.accelerator is lite.active.accelerator

    core.Lite(accelerator="cpu", precision="bf16-true").launch(run)
