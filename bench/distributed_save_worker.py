"""One 2-rank ``fsdp`` job timing three ways of saving the same sharded model, alternated in one process pair.

    python -m bench.distributed_save_worker MEGABYTES REPETITIONS OUT

Each repetition runs three ways of saving on both ranks (OMP_NUM_THREADS=1, gloo on the CPU), the order rotating
from one repetition to the next:

- ``full``: every rank gathers the whole state (``DTensor.full_tensor``), rank 0 writes it as one file through
  the ``torch`` checkpoint_io; what ``FSDPStrategy(state_dict_type="full")`` does on ``Lite.save``;
- ``sharded``: ``Lite.save`` under ``fsdp`` with the ``distributed`` checkpoint_io (core-dcp): every rank writes
  its own shards into one directory;
- ``raw_dcp``: plain ``torch.distributed.checkpoint.save`` of the same shards, with the same writer options.

Two untimed rounds come first (when REPETITIONS > 1). Before each sample rank 0 removes that way's previous
checkpoint and flushes the disk (``os.sync``), untimed, so every sample writes a new checkpoint from a clean
start. Each sample is the wall time from a barrier before the
save until every rank has finished (a barrier after, then the maximum over the ranks). Global rank 0 writes
``OUT/report.json``: the samples and the files each way wrote, with their sizes. The caller
(bench/distributed_save.py) kills the job if it hangs.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor

from core import Lite
from core.builtin.checkpoint_io import TorchCheckpointIO

WAYS = ("full", "sharded", "raw_dcp")
# Untimed rounds first (full size only): the first seconds of writing in a fresh job run ~3x slower for every
# way (memory for the page cache being touched for the first time), which is not what is compared here.
WARMUP_ROUNDS = 2


def make_model(lite: Lite, megabytes: int) -> torch.nn.Module:
    """A stack of square ``Linear`` layers of about ``megabytes`` MB (float32), created empty and sharded."""
    width = 2048 if megabytes >= 32 else 256
    layer_bytes = 4 * width * (width + 1)
    layers = max(1, round(megabytes * 1024 * 1024 / layer_bytes))
    with lite.init_module(empty_init=True):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
        return lite.setup(model)


def timed(lite: Lite, action: Callable[[], None]) -> float:
    """Seconds from a common start until the last rank finished ``action``."""
    lite.barrier("bench: before save")
    start = time.perf_counter()
    action()
    lite.barrier("bench: after save")
    elapsed = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
    return float(lite.all_reduce(elapsed, reduce_op="max"))


def clear(lite: Lite, path: Path) -> None:
    """Remove the previous save at ``path`` and flush the disk, untimed: every sample writes a new checkpoint."""
    if lite.is_global_zero:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        os.sync()


def files(path: Path) -> dict[str, int]:
    """Every file written at ``path`` (a file, or a directory of them) with its size in bytes."""
    if path.is_file():
        return {path.name: path.stat().st_size}
    return {entry.name: entry.stat().st_size for entry in sorted(path.iterdir()) if entry.is_file()}


def main(lite: Lite, megabytes: int, repetitions: int, out: Path) -> None:
    torch.set_num_threads(1)
    measure(lite, megabytes, repetitions, out)
    # The fsdp model is held in reference cycles (its hooks), and through them the process group; freed at
    # interpreter exit instead, the group's gloo threads abort the process ("terminate called without an
    # active exception"). Free it now, before the strategy's teardown destroys the group.
    gc.collect()


def measure(lite: Lite, megabytes: int, repetitions: int, out: Path) -> None:
    model = make_model(lite, megabytes)
    paths = {"full": out / "full.pt", "sharded": out / "sharded", "raw_dcp": out / "raw_dcp"}
    full_io = TorchCheckpointIO()

    def full() -> None:
        whole = {name: value.full_tensor() if isinstance(value, DTensor) else value
                 for name, value in model.state_dict().items()}
        if lite.is_global_zero:
            full_io.checkpoint_io_save(checkpoint={"model": whole}, path=str(paths["full"]), storage_options=None)

    def sharded() -> None:
        lite.save(paths["sharded"], {"model": model})

    def raw_dcp() -> None:
        dcp.save({"model": model.state_dict()}, storage_writer=dcp.FileSystemWriter(paths["raw_dcp"]))

    actions = {"full": full, "sharded": sharded, "raw_dcp": raw_dcp}
    samples: dict[str, list[float]] = {way: [] for way in WAYS}
    warmup = WARMUP_ROUNDS if repetitions > 1 else 0
    for repetition in range(warmup + repetitions):
        # A B C, B C A, C A B, ...: no way always follows the same other one.
        for index in range(len(WAYS)):
            way = WAYS[(repetition + index) % len(WAYS)]
            clear(lite, paths[way])
            seconds = timed(lite, actions[way])
            if repetition >= warmup:
                samples[way].append(seconds)
    if lite.is_global_zero:
        parameters = sum(parameter.numel() for parameter in model.parameters())
        report = {
            "samples": samples,
            "files": {way: files(path) for way, path in paths.items()},
            "parameters": parameters,
            "state_bytes": 4 * parameters,
        }
        (out / "report.json").write_text(json.dumps(report))


if __name__ == "__main__":
    megabytes, repetitions, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    Lite(accelerator="cpu", strategy="fsdp", devices=2, plugins=["distributed"]).launch(
        main, megabytes, repetitions, out
    )
