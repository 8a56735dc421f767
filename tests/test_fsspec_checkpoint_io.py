"""Remote paths for the ``torch`` and ``async`` checkpoint_io through fsspec: ``memory://`` and ``file://``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

import core
from core.builtin.async_checkpoint_io import AsyncCheckpointIO
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.toolkit import _storage


@pytest.fixture(params=["torch", "async"])
def io(request: pytest.FixtureRequest) -> Iterator[TorchCheckpointIO]:
    plugin = TorchCheckpointIO() if request.param == "torch" else AsyncCheckpointIO()
    yield plugin
    teardown = getattr(plugin, "checkpoint_io_teardown", None)
    if teardown is not None:
        teardown()


@pytest.fixture
def memory_root() -> Iterator[str]:
    root = f"memory://core-tests-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def finish(io: TorchCheckpointIO) -> None:
    wait = getattr(io, "wait", None)
    if wait is not None:
        wait()


def state() -> dict[str, Any]:
    return {"weight": torch.arange(6.0).reshape(2, 3), "step": 4, "nested": {"lr": [0.1]}}


def test_memory_round_trip_leaves_no_temporary(io: TorchCheckpointIO, memory_root: str) -> None:
    path = f"{memory_root}/run/ckpt.pt"
    io.checkpoint_io_save(checkpoint=state(), path=path, storage_options=None)
    finish(io)
    loaded = io.checkpoint_io_load(path=path, map_location="cpu", weights_only=True)
    assert torch.equal(loaded["weight"], state()["weight"]) and loaded["step"] == 4
    assert _storage.list_names(f"{memory_root}/run") == ["ckpt.pt"]
    io.checkpoint_io_remove(path=path)
    finish(io)
    assert not fsspec.filesystem("memory").exists(path.removeprefix("memory://"))


def test_file_urls_take_the_atomic_local_route(io: TorchCheckpointIO, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sub/ckpt.pt"
    io.checkpoint_io_save(checkpoint=state(), path=url, storage_options=None)
    finish(io)
    assert (tmp_path / "sub" / "ckpt.pt").is_file() and sorted(p.name for p in (tmp_path / "sub").iterdir()) == [
        "ckpt.pt"
    ]
    loaded = io.checkpoint_io_load(path=url, map_location=None, weights_only=True)
    assert torch.equal(loaded["weight"], state()["weight"])
    # The same bytes as a plain local save.
    TorchCheckpointIO().checkpoint_io_save(checkpoint=state(), path=str(tmp_path / "plain.pt"), storage_options=None)
    assert (tmp_path / "sub" / "ckpt.pt").read_bytes() == (tmp_path / "plain.pt").read_bytes()


def test_a_failed_remote_save_keeps_the_previous_file(io: TorchCheckpointIO, memory_root: str) -> None:
    path = f"{memory_root}/ckpt.pt"
    io.checkpoint_io_save(checkpoint={"v": torch.ones(2)}, path=path, storage_options=None)
    finish(io)

    class Unpicklable:
        def __reduce__(self) -> tuple[object, ...]:
            raise RuntimeError("cannot pickle this")

    with pytest.raises((RuntimeError, core.CheckpointError), match="cannot pickle this"):
        io.checkpoint_io_save(checkpoint={"v": Unpicklable()}, path=path, storage_options=None)
        finish(io)
    assert torch.equal(io.checkpoint_io_load(path=path, map_location=None, weights_only=True)["v"], torch.ones(2))
    assert _storage.list_names(memory_root) == ["ckpt.pt"]


class _Payload:
    def __reduce__(self) -> tuple[object, ...]:
        return (print, ("ran code from the file",))


def test_weights_only_holds_for_remote_files(io: TorchCheckpointIO, memory_root: str) -> None:
    path = f"{memory_root}/evil.pt"
    with fsspec.open(path, "wb") as handle:
        torch.save({"payload": _Payload()}, handle)
    with pytest.raises(core.CheckpointError, match=r"Refused to load 'memory://.*evil\.pt'.*weights_only=False"):
        io.checkpoint_io_load(path=path, map_location="cpu", weights_only=True)


def test_missing_and_truncated_remote_files(memory_root: str) -> None:
    io = TorchCheckpointIO()
    with pytest.raises(core.CheckpointError, match=r"No checkpoint at 'memory://.*nope\.pt': the file does not exist"):
        io.checkpoint_io_load(path=f"{memory_root}/nope.pt", map_location=None, weights_only=True)
    good = f"{memory_root}/good.pt"
    io.checkpoint_io_save(checkpoint={"v": torch.ones(1000)}, path=good, storage_options=None)
    with fsspec.open(good, "rb") as handle:
        content = handle.read()
    with fsspec.open(f"{memory_root}/cut.pt", "wb") as handle:
        handle.write(content[:1500])
    with pytest.raises(core.CheckpointError, match="corrupt or truncated"):
        io.checkpoint_io_load(path=f"{memory_root}/cut.pt", map_location=None, weights_only=True)


def test_storage_options_reach_the_filesystem(monkeypatch: pytest.MonkeyPatch, memory_root: str) -> None:
    seen: list[dict[str, Any]] = []
    real = fsspec.core.url_to_fs

    def recording(url: str, **options: Any) -> Any:
        seen.append(options)
        return real(url, **options)

    monkeypatch.setattr(fsspec.core, "url_to_fs", recording)
    io = TorchCheckpointIO(storage_options={"skip_instance_cache": True})
    io.checkpoint_io_save(checkpoint={"v": torch.ones(1)}, path=f"{memory_root}/a.pt", storage_options=None)
    io.checkpoint_io_save(checkpoint={"v": torch.ones(1)}, path=f"{memory_root}/b.pt", storage_options={"x": 1})
    io.checkpoint_io_load(path=f"{memory_root}/a.pt", map_location=None, weights_only=True)
    assert seen == [{"skip_instance_cache": True}, {"x": 1}, {"skip_instance_cache": True}]


def test_an_unknown_protocol_names_the_protocol_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r"No usable fsspec implementation for the protocol 'nosuchfs'"):
        TorchCheckpointIO().checkpoint_io_save(checkpoint={}, path="nosuchfs://bucket/c.pt", storage_options=None)


def test_lite_saves_to_a_url(memory_root: str) -> None:
    def train(lite: core.Lite) -> float:
        model = lite.setup(torch.nn.Linear(3, 1))
        torch.nn.init.constant_(model.weight, 2.0)
        lite.save(f"{memory_root}/lite.pt", {"model": model})
        torch.nn.init.zeros_(model.weight)
        lite.load(f"{memory_root}/lite.pt", {"model": model})
        return float(model.weight.detach().sum())

    assert core.Lite(accelerator="cpu", devices=1, plugins=[AsyncCheckpointIO()]).launch(train) == 6.0
