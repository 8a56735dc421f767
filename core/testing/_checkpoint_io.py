"""The checkpoint_io kit: round trips, refusing code on load, atomic writes, removal, a run with it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import core
from core._errors import CoreError
from core.testing._base import Conformance


class Unpicklable:
    """Refuses to be pickled, so that a save fails half-way."""

    def __reduce__(self) -> Any:
        raise RuntimeError("this object refuses to be pickled")


class CodeOnLoad:
    """Leaves a mark in a file when unpickled: loading it with ``weights_only=True`` must not run it."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self) -> Any:
        return (Path.touch, (Path(self.mark),))


def _sample() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    return {
        "model": {"weight": torch.randn(4, 3, generator=generator), "bias": torch.zeros(4, dtype=torch.float64)},
        "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
        "counts": torch.arange(5),
        "step": 7,
        "name": "run",
        "nested": [1.5, {"flag": True}],
    }


def _assert_same(actual: Any, expected: Any, where: str = "checkpoint") -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.dtype == expected.dtype, f"{where}: {actual!r}"
        assert torch.equal(actual.cpu(), expected), f"{where}: {actual} != {expected}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{where}: keys {actual!r}"
        for key in expected:
            _assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), f"{where}: {actual!r}"
        for index, (left, right) in enumerate(zip(actual, expected, strict=True)):
            _assert_same(left, right, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _save_and_load(lite: core.Lite, path: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module, optimizer = lite.setup(model, optimizer)
    lite.save(path, {"model": module, "optimizer": optimizer, "step": 3})
    expected = {name: value.clone() for name, value in model.state_dict().items()}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    remainder = lite.load(path, {"model": module, "optimizer": optimizer})
    return {"expected": expected, "restored": model.state_dict(), "remainder": remainder}


class CheckpointIOConformance(Conformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    Checks: tensors of several dtypes and plain containers round-trip; a second save replaces the first;
    ``weights_only=True`` refuses a file that would run code, without running it; a save that fails
    half-way leaves the previous checkpoint intact; a missing file is a :class:`core.CoreError` naming the
    path; ``checkpoint_io_remove`` deletes; and ``Lite.save`` / ``Lite.load`` work with the plugin.
    """

    kind: ClassVar[str] = "checkpoint_io"

    def save(self, plugin: object, checkpoint: dict[str, Any], path: Path) -> None:
        self.call(plugin, self.kind, "checkpoint_io_save", checkpoint=checkpoint, path=str(path), storage_options=None)

    def load(self, plugin: object, path: Path, weights_only: bool = True) -> Any:
        return self.call(
            plugin, self.kind, "checkpoint_io_load", path=str(path), map_location="cpu", weights_only=weights_only
        )

    def test_round_trip(self, plugin: object, tmp_path: Path) -> None:
        path = tmp_path / "sub" / "state.ckpt"
        self.save(plugin, _sample(), path)
        _assert_same(self.load(plugin, path), _sample())

    def test_second_save_replaces_the_first(self, plugin: object, tmp_path: Path) -> None:
        path = tmp_path / "state.ckpt"
        self.save(plugin, {"step": 1}, path)
        self.save(plugin, {"step": 2, "tensor": torch.ones(2)}, path)
        _assert_same(self.load(plugin, path), {"step": 2, "tensor": torch.ones(2)})

    def test_weights_only_refuses_code_without_running_it(self, plugin: object, tmp_path: Path) -> None:
        path, mark = tmp_path / "unsafe.ckpt", tmp_path / "code-ran"
        try:
            self.save(plugin, {"payload": CodeOnLoad(str(mark))}, path)
        except CoreError:
            return  # a format that cannot hold code is safe by construction
        try:
            self.load(plugin, path, weights_only=True)
        except CoreError as refused:
            assert not mark.exists(), "loading with weights_only=True ran code from the file before refusing it"
            assert str(path) in str(refused), f"the refusal does not name the file: {refused}"
            return
        ran = " and ran code from the file" if mark.exists() else ""
        pytest.fail(f"loading with weights_only=True accepted a file holding arbitrary objects{ran}", pytrace=False)

    def test_failed_save_keeps_the_previous_checkpoint(self, plugin: object, tmp_path: Path) -> None:
        path = tmp_path / "state.ckpt"
        self.save(plugin, _sample(), path)
        with pytest.raises(Exception):  # noqa: B017 - any error: the point is what stays on disk
            self.save(plugin, {"model": torch.ones(3), "bad": Unpicklable()}, path)
        _assert_same(self.load(plugin, path), _sample())

    def test_missing_file_is_a_core_error_naming_it(self, plugin: object, tmp_path: Path) -> None:
        path = tmp_path / "absent.ckpt"
        with pytest.raises(CoreError) as missing:
            self.load(plugin, path)
        assert str(path) in str(missing.value), f"the error does not name the path: {missing.value}"

    def test_remove(self, plugin: object, tmp_path: Path) -> None:
        if not self.implements(plugin, "checkpoint_io_remove"):
            pytest.skip("checkpoint_io_remove is optional and not implemented")
        path = tmp_path / "state.ckpt"
        self.save(plugin, {"step": 1}, path)
        self.call(plugin, self.kind, "checkpoint_io_remove", path=str(path))
        assert not os.path.exists(path), "checkpoint_io_remove left the checkpoint in place"
        self.call(plugin, self.kind, "checkpoint_io_teardown")

    def test_lite_save_and_load(self, plugin: object, tmp_path: Path) -> None:
        lite = core.Lite(accelerator="cpu", strategy="single_device", devices=1, plugins=["local", plugin])
        outcome = lite.launch(_save_and_load, str(tmp_path / "lite.ckpt"))
        assert outcome is not None
        _assert_same(outcome["restored"], outcome["expected"], "restored module")
        assert outcome["remainder"] == {"step": 3}
