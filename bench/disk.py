"""Checkpoint throughput against the disk: save and load MB/s of each checkpoint_io next to the disk's own speed.

In one process, on the same directory (``tempfile``'s, the disk of /tmp): the disk's sequential write (Python
``write`` of 64 MB chunks, then ``fsync``) and read (after ``posix_fadvise(DONTNEED)`` evicted the file's pages,
so it reads from the disk where the kernel honours it) of the same number of bytes; then ``torch``, ``async`` and
``distributed`` (core-dcp, one process) checkpoint_io saving and loading the GPT's full training state (model +
AdamW, bench/gpt_worker.py) and a ~1 GB state. ``async`` also reports how long its save call blocks the caller.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench._harness import Result
from bench.checkpoints import _state
from bench.gpt import FULL, TINY

CHUNK = 64 * 1024 * 1024


def _seconds(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _evict(path: Path) -> None:
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        with file.open("rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def disk_speed(directory: Path, size: int) -> tuple[float, float]:
    """Sequential write (with fsync) and read seconds of ``size`` bytes in ``directory``."""
    path = directory / "disk.bin"
    chunk = os.urandom(min(CHUNK, size))

    def write() -> None:
        with path.open("wb") as handle:
            for offset in range(0, size, len(chunk)):
                handle.write(chunk[: size - offset])
            handle.flush()
            os.fsync(handle.fileno())

    def read() -> None:
        with path.open("rb") as handle:
            while handle.read(CHUNK):
                pass

    write_s = _seconds(write)
    _evict(path)
    read_s = _seconds(read)
    path.unlink()
    return write_s, read_s


def gpt_state(shape: tuple[int, int, int]) -> dict[str, Any]:
    """The GPT's full training state after one AdamW step: model and optimizer state dicts."""
    from bench.gpt_worker import GPT, VOCAB

    torch.manual_seed(0)
    layers, dim, context = shape
    model = GPT(layers, dim, context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, VOCAB, (1, context))).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}


def _bytes(state: Any) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(_bytes(value) for value in state.values())
    if isinstance(state, list | tuple):
        return sum(_bytes(value) for value in state)
    return 0


def _ios() -> dict[str, Any]:
    from core.builtin.async_checkpoint_io import AsyncCheckpointIO
    from core.builtin.checkpoint_io import TorchCheckpointIO

    ios: dict[str, Any] = {"torch": TorchCheckpointIO(), "async": AsyncCheckpointIO()}
    try:
        from core_dcp import DistributedCheckpointIO  # type: ignore[import-not-found,unused-ignore]

        ios["distributed"] = DistributedCheckpointIO()
    except ImportError:
        print("  disk: `distributed` skipped, core-dcp is not installed", flush=True)
    return ios


def throughput(label: str, state: dict[str, Any], directory: Path, repetitions: int) -> list[Result]:
    """Each repetition measures the disk, then saves and loads with every checkpoint_io (A B C D A B C D ...).

    The disk of a virtual machine drifts (its write speed varied 2x between runs here), so the baseline is taken
    in the same rounds as the saves it is compared with, never once up front."""
    size = _bytes(state)
    megabytes = size / 1e6
    ios = _ios()
    disk: list[tuple[float, float]] = []
    saves: dict[str, list[float]] = {name: [] for name in ios}
    loads: dict[str, list[float]] = {name: [] for name in ios}
    blocks: list[float] = []
    for index in range(repetitions):
        disk.append(disk_speed(directory, size))
        for name, io in ios.items():
            path = str(directory / f"{name}-{index}.ckpt")
            blocked = time.perf_counter()
            io.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
            if name == "async":
                blocks.append(time.perf_counter() - blocked)
            if hasattr(io, "checkpoint_io_teardown"):
                io.checkpoint_io_teardown()  # an async save finishes here
            saves[name].append(time.perf_counter() - blocked)
            _evict(Path(path))
            loaded = time.perf_counter()
            io.checkpoint_io_load(path=path, map_location="cpu", weights_only=False)
            loads[name].append(time.perf_counter() - loaded)
            target = Path(path)
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    disk_write = megabytes / statistics.median(w for w, _ in disk)
    disk_read = megabytes / statistics.median(r for _, r in disk)
    common = (f"{repetitions} rounds (disk, then each checkpoint_io), medians; state {megabytes:.0f} MB; "
              f"disk write samples {[round(megabytes / w) for w, _ in disk]} MB/s")
    results = []
    for name in ios:
        save, load = megabytes / statistics.median(saves[name]), megabytes / statistics.median(loads[name])
        results += [
            Result(f"`{name}` checkpoint save throughput, {label}, vs the disk's sequential write (fsync)", save,
                   disk_write, "MB/s", ">= 0.77x (within 1.3x of the disk)" if name == "distributed" else "report",
                   met=save / disk_write >= 1 / 1.3 if name == "distributed" else None,
                   note=f"{common}; save samples {[round(megabytes / s) for s in saves[name]]} MB/s; save until "
                        "the file is durable (async: until its write finished)"),
            Result(f"`{name}` checkpoint load throughput, {label}, vs the disk's sequential read", load, disk_read,
                   "MB/s", "report", note=f"{common}; page cache evicted with posix_fadvise before each read"),
        ]
        if name == "async":
            results.append(Result(
                f"`async` save: time the call blocks the loop, {label}, vs the full save", statistics.median(blocks),
                statistics.median(saves[name]), "s", "report (the copy to host memory)",
                note=f"samples {[round(b * 1000) for b in blocks]} ms; on CPU the copy is a host-to-host clone",
            ))
    return results


def run(megabytes: int) -> list[Result]:
    """``megabytes``: the size of the large state (1024 in ``make bench``)."""
    repetitions = 5 if megabytes >= 100 else 1
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        shape = FULL if megabytes >= 100 else TINY
        results = throughput(f"GPT {shape[0]}x{shape[1]} training state", gpt_state(shape), directory, repetitions)
        results += throughput(f"{megabytes} MB state", _state(megabytes), directory, repetitions)
    return results
