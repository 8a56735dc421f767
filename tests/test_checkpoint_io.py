"""The built-in ``torch`` checkpoint_io: atomic writes and weights-only loads."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core.builtin.checkpoint_io import TorchCheckpointIO


@pytest.fixture
def io() -> TorchCheckpointIO:
    return TorchCheckpointIO()


def test_round_trip_creates_parent_directories(io: TorchCheckpointIO, tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ckpt.pt"
    state: dict[str, Any] = {"weight": torch.arange(6.0).reshape(2, 3), "step": 7, "nested": {"lr": [0.1, 0.01]}}
    io.checkpoint_io_save(checkpoint=state, path=str(path), storage_options=None)
    loaded = io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=True)
    assert torch.equal(loaded["weight"], state["weight"])
    assert loaded["step"] == 7 and loaded["nested"] == {"lr": [0.1, 0.01]}
    assert [p.name for p in path.parent.iterdir()] == ["ckpt.pt"]  # no temporary file left behind


def test_failed_save_leaves_the_previous_file_and_no_temporary(io: TorchCheckpointIO, tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    io.checkpoint_io_save(checkpoint={"v": torch.ones(3)}, path=str(path), storage_options=None)

    class Unpicklable:
        def __reduce__(self) -> tuple[object, ...]:
            raise RuntimeError("cannot pickle this")

    refused = r"could not be saved to .*ckpt\.pt': RuntimeError: cannot pickle this\. Nothing was written there"
    with pytest.raises(core.CheckpointError, match=refused):
        io.checkpoint_io_save(checkpoint={"v": Unpicklable()}, path=str(path), storage_options=None)
    assert torch.equal(io.checkpoint_io_load(path=str(path), map_location=None, weights_only=True)["v"], torch.ones(3))
    assert os.listdir(tmp_path) == ["ckpt.pt"]


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.touch, (Path(self.marker),))


def test_weights_only_refuses_code_and_runs_none_of_it(io: TorchCheckpointIO, tmp_path: Path) -> None:
    path, marker = tmp_path / "evil.pt", tmp_path / "pwned"
    torch.save({"payload": _Payload(str(marker))}, path)
    with pytest.raises(core.CheckpointError) as excinfo:
        io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=True)
    message = str(excinfo.value)
    assert "Refused to load" in message and "evil.pt" in message and "weights_only=False" in message
    assert not marker.exists()
    io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=False)  # the explicit opt-in
    assert marker.exists()


def test_missing_and_truncated_files(io: TorchCheckpointIO, tmp_path: Path) -> None:
    with pytest.raises(core.CheckpointError, match="does not exist"):
        io.checkpoint_io_load(path=str(tmp_path / "nope.pt"), map_location=None, weights_only=True)
    good = tmp_path / "good.pt"
    io.checkpoint_io_save(checkpoint={"v": torch.ones(1000)}, path=str(good), storage_options=None)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1500])
    with pytest.raises(core.CheckpointError, match="corrupt or truncated"):
        io.checkpoint_io_load(path=str(truncated), map_location=None, weights_only=True)


def test_storage_options_are_refused_by_name(io: TorchCheckpointIO, tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=re.escape("takes no storage_options, got {'x': 1}")):
        io.checkpoint_io_save(checkpoint={}, path=str(tmp_path / "c.pt"), storage_options={"x": 1})


def test_remove_files_and_directories(io: TorchCheckpointIO, tmp_path: Path) -> None:
    file, directory = tmp_path / "f.pt", tmp_path / "sharded"
    file.write_bytes(b"x")
    (directory / "inner").mkdir(parents=True)
    io.checkpoint_io_remove(path=str(file))
    io.checkpoint_io_remove(path=str(directory))
    io.checkpoint_io_remove(path=str(tmp_path / "never-existed"))
    assert list(tmp_path.iterdir()) == []
