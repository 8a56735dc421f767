"""Hugging Face's safetensors format (core-safetensors) against the disk: save and load MB/s of a module's weights.

In one process, in rounds (bench/disk.py's disk baseline first in every round, since the disk drifts): the disk's
sequential write (with fsync) and read of the weights' size, then the ``safetensors`` checkpoint_io saving
(until durable) and loading ``{"model": <state dict>}`` as one ``model.safetensors`` and as four shards with the
index, and the ``torch`` checkpoint_io doing the same for comparison. Then a 2-rank ``fsdp`` job
(bench/safetensors_io_worker.py): sharded weights written as four files by both ranks (each gathering and writing
its own) against rank 0 gathering and writing all of them, each against the disk, and ``load_weights`` reading
each rank's slices.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench._harness import Result
from bench._jobs import run_job
from bench.disk import _evict, disk_speed


def weights(megabytes: int) -> dict[str, torch.Tensor]:
    """A state dict of square float32 layers of about ``megabytes`` MB in all."""
    width = 2048 if megabytes >= 32 else 256
    layers = max(1, round(megabytes * 1024 * 1024 / (4 * width * (width + 1))))
    generator = torch.Generator().manual_seed(0)
    state: dict[str, torch.Tensor] = {}
    for layer in range(layers):
        state[f"{layer}.weight"] = torch.randn(width, width, generator=generator)
        state[f"{layer}.bias"] = torch.randn(width, generator=generator)
    return state


def _ios(size: int) -> dict[str, Any]:
    from core.builtin.checkpoint_io import TorchCheckpointIO

    ios: dict[str, Any] = {"torch": TorchCheckpointIO()}
    try:
        from core_safetensors import SafetensorsCheckpointIO  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        print("  safetensors_io: skipped, core-safetensors is not installed", flush=True)
        return {}
    ios["safetensors"] = SafetensorsCheckpointIO()
    ios["safetensors, 4 shards"] = SafetensorsCheckpointIO(max_shard_size=size // 4 + 1)
    return ios


def _mbps(megabytes: float, seconds: list[float]) -> list[int]:
    return [round(megabytes / value) for value in seconds]


def one_process(megabytes: int, directory: Path, repetitions: int) -> list[Result]:
    state = {"model": weights(megabytes)}
    size = sum(tensor.nbytes for tensor in state["model"].values())
    ios = _ios(size)
    if not ios:
        return []
    mb = size / 1e6
    disk: list[tuple[float, float]] = []
    saves: dict[str, list[float]] = {name: [] for name in ios}
    loads: dict[str, list[float]] = {name: [] for name in ios}
    for index in range(repetitions):
        disk.append(disk_speed(directory, size))
        for name, io in ios.items():
            path = directory / f"{index}-{name.replace(', ', '-').replace(' ', '_')}"
            start = time.perf_counter()
            io.checkpoint_io_save(checkpoint=state, path=str(path), storage_options=None)
            saves[name].append(time.perf_counter() - start)
            _evict(path)
            start = time.perf_counter()
            io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=True)
            loads[name].append(time.perf_counter() - start)
            io.checkpoint_io_remove(path=str(path))
    disk_write = mb / statistics.median(write for write, _ in disk)
    disk_read = mb / statistics.median(read for _, read in disk)
    common = (f"one process, {repetitions} rounds (disk, then each format), medians; {mb:.0f} MB of float32 weights; "
              f"disk write samples {_mbps(mb, [w for w, _ in disk])} MB/s, read {_mbps(mb, [r for _, r in disk])} MB/s")
    torch_note = (f"`torch` checkpoint_io, same rounds: save {mb / statistics.median(saves['torch']):.0f} MB/s, load "
                  f"{mb / statistics.median(loads['torch']):.0f} MB/s")
    results = []
    for name in ios:
        if name == "torch":
            continue
        save, load = mb / statistics.median(saves[name]), mb / statistics.median(loads[name])
        results += [
            Result(f"`{name}` save throughput ({mb:.0f} MB of weights) vs the disk's sequential write (fsync)", save,
                   disk_write, "MB/s", "report", note=f"{common}; samples {_mbps(mb, saves[name])} MB/s; until the "
                   f"files are durable (fsync, rename); {torch_note}"),
            Result(f"`{name}` load throughput ({mb:.0f} MB of weights) vs the disk's sequential read", load, disk_read,
                   "MB/s", "report", note=f"{common}; samples {_mbps(mb, loads[name])} MB/s; page cache evicted "
                   f"with posix_fadvise before each load; {torch_note}"),
        ]
    return results


def two_ranks(megabytes: int, directory: Path, repetitions: int) -> list[Result]:
    run_job("bench.safetensors_io_worker", [str(megabytes), str(repetitions), str(directory)],
            timeout=120 + 40 * repetitions)
    report = json.loads((directory / "report.json").read_text())
    samples: dict[str, list[float]] = report["samples"]
    mb = report["state_bytes"] / 1e6
    median = {way: statistics.median(values) for way, values in samples.items()}
    disk_write, disk_read = mb / median["disk"], mb / median["disk_read"]
    written = {way: ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in found.items() if "safetensors" in name)
               for way, found in report["files"].items()}
    common = (f"2-rank fsdp job, {len(samples['all'])} rounds, medians; wall time until both ranks finished; disk "
              f"(rank 0 alone, same rounds) write {_mbps(mb, samples['disk'])} MB/s, read "
              f"{_mbps(mb, samples['disk_read'])} MB/s")
    return [
        Result(f"`safetensors` save on 2 ranks (fsdp, {mb:.0f} MB, 4 files): each rank gathers and writes its own "
               f"files vs the disk's sequential write", mb / median["all"], disk_write, "MB/s", "report",
               note=f"{common}; samples {_mbps(mb, samples['all'])} MB/s; wrote {written['all']}"),
        Result(f"`safetensors` save on 2 ranks (fsdp, {mb:.0f} MB, 4 files): rank 0 gathers and writes every file vs "
               f"the disk's sequential write", mb / median["rank0"], disk_write, "MB/s", "report",
               note=f"{common}; samples {_mbps(mb, samples['rank0'])} MB/s; the same bytes as the row above"),
        Result(f"`load_weights` on 2 ranks (fsdp, {mb:.0f} MB): each rank reads only its slices vs the disk's "
               f"sequential read", mb / median["load"], disk_read, "MB/s", "report",
               note=f"{common}; samples {_mbps(mb, samples['load'])} MB/s (both ranks' bytes together); page cache "
               f"evicted before each load"),
    ]


def run(megabytes: int) -> list[Result]:
    """``megabytes``: the size of the weights (512 in ``make bench``)."""
    repetitions = 5 if megabytes >= 100 else 1
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = one_process(megabytes, Path(tmp), repetitions)
    if not results:
        return results
    with tempfile.TemporaryDirectory() as tmp:
        results += two_ranks(megabytes, Path(tmp), repetitions)
    return results
