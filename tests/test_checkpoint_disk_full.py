"""A save into a full filesystem names the cause under every checkpoint_io, and the previous checkpoint survives.

The full filesystem is real: a 256 KiB tmpfs mounted by the test (CI runs as root on a fresh machine) and unmounted
at teardown; where mounting is not permitted the tests are skipped with that reason. torch's zip writer reports a
failed write as ``unexpected pos 1152 vs 1046``; the error must instead say ENOSPC, what the checkpoint needs, what
is free and which mount it is.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from core_dcp import DistributedCheckpointIO
from core_safetensors import SafetensorsCheckpointIO

from core import CheckpointError
from core.builtin.async_checkpoint_io import AsyncCheckpointIO
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.toolkit._storage import full_disk_cause

SIZE = 256 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a small tmpfs")
    mount_point = tmp_path / f"full-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a {SIZE}-byte tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        gc.collect()  # safetensors' loaded tensors map their file until they are collected
        if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount_point)], capture_output=True, timeout=30, check=True)


def small_state() -> dict[str, Any]:
    return {"model": {"weight": torch.arange(100, dtype=torch.float32)}, "step": 1}


def big_state() -> dict[str, Any]:
    return {"model": {"weight": torch.ones(200_000)}, "step": 2}  # 800 KB: more than the whole filesystem


def _torch(path: str) -> tuple[Callable[[dict[str, Any]], None], Callable[[], dict[str, Any]]]:
    io = TorchCheckpointIO()
    return (lambda state: io.checkpoint_io_save(checkpoint=state, path=path, storage_options=None),
            lambda: io.checkpoint_io_load(path=path, map_location=None, weights_only=True))


def _async(path: str) -> tuple[Callable[[dict[str, Any]], None], Callable[[], dict[str, Any]]]:
    io = AsyncCheckpointIO()

    def save(state: dict[str, Any]) -> None:
        io.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        io.wait()  # the background write's failure is raised here

    return save, lambda: io.checkpoint_io_load(path=path, map_location=None, weights_only=True)


def _directory(io: Any, path: str) -> tuple[Callable[[dict[str, Any]], None], Callable[[], dict[str, Any]]]:
    return (lambda state: io.checkpoint_io_save(checkpoint=state, path=path, storage_options=None),
            lambda: io.checkpoint_io_load(path=path, map_location=None, weights_only=True))


IOS = {
    "torch": _torch,
    "async": _async,
    "distributed": lambda path: _directory(DistributedCheckpointIO(), path),
    "safetensors": lambda path: _directory(SafetensorsCheckpointIO(), path),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(IOS))
def test_a_full_filesystem_is_named_and_the_previous_checkpoint_stays(small_disk: Path, name: str) -> None:
    path = str(small_disk / "last.ckpt")
    save, load = IOS[name](path)
    save(small_state())
    with pytest.raises(CheckpointError) as caught:
        save(big_state())
    message = str(caught.value)
    assert "unexpected pos" not in message and "picklable" not in message and "pickle it" not in message, message
    assert "errno ENOSPC" in message and "No space left on device" in message, message
    assert "it needs about 800000 bytes" in message, message  # the checkpoint's tensors
    assert " are free on the filesystem mounted at " + str(small_disk) + " (tmpfs" in message, message
    assert "a previous checkpoint at that path is untouched" in message, message
    # ... and it is: the first save loads with its values.
    loaded = load()
    assert loaded["step"] == 1
    assert torch.equal(loaded["model"]["weight"], torch.arange(100, dtype=torch.float32))
    # Nothing of the failed save is left taking the space: the same big save fails the same way, a small one fits.
    save({"model": {"weight": torch.zeros(10)}, "step": 3})
    assert load()["step"] == 3


@pytest.mark.timeout(60)
def test_the_torch_file_says_how_much_was_written_before_the_disk_filled(small_disk: Path) -> None:
    save, _ = _torch(str(small_disk / "one.ckpt"))
    with pytest.raises(CheckpointError, match=r"bytes \([\d.]+ KiB\) were written before the write failed"):
        save(big_state())


@pytest.mark.parametrize(
    "text",
    [
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
        "[Errno 122] Disk quota exceeded: '/data/ckpt'",
        "write failed: No space left on device",
    ],
)
def test_a_full_disk_reported_only_in_a_message_is_recognised(text: str) -> None:
    try:
        try:
            raise RuntimeError(text)
        except RuntimeError as inner:
            raise RuntimeError("unexpected pos 1152 vs 1046") from inner
    except RuntimeError as error:
        cause = full_disk_cause(error)
    assert cause is not None and cause.errno in (28, 122)


def test_other_errors_are_not_taken_for_a_full_disk() -> None:
    assert full_disk_cause(RuntimeError("unexpected pos 1152 vs 1046")) is None
    assert full_disk_cause(OSError(13, "Permission denied")) is None
