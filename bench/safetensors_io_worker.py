"""One 2-rank ``fsdp`` job timing safetensors weights written from shards, both ways, against the disk.

    python -m bench.safetensors_io_worker MEGABYTES REPETITIONS OUT

The model is bench/distributed_save_worker.py's stack of ``Linear`` layers (about MEGABYTES MB of float32), sharded
by ``fsdp``. Each repetition, on both ranks (OMP_NUM_THREADS=1, gloo on the CPU), the order rotating:

- ``all``: ``save_weights(model, ..., max_shard_size=<a quarter of the weights>, writers="all")``: the four files are
  dealt out to the ranks, each gathers the tensors of its own files and writes them;
- ``rank0``: the same with ``writers="rank0"``: rank 0 gathers everything and writes the four files alone;
- ``disk``: rank 0 writes and reads the same number of bytes sequentially (bench/disk.py's baseline) while rank 1
  waits;
- then ``load``: ``load_weights`` of the ``all`` files into the sharded model, each rank reading only its slices,
  with the files' pages evicted first.

Each sample is the wall time from a barrier before until every rank finished. Untimed warm-up rounds come first
(when REPETITIONS > 1). Global rank 0 writes ``OUT/report.json``.
"""

from __future__ import annotations

import gc
import json
import sys
from functools import partial
from pathlib import Path

import torch
from core_safetensors import load_weights, save_weights  # type: ignore[import-not-found,unused-ignore]

from bench.disk import _evict, disk_speed
from bench.distributed_save_worker import WARMUP_ROUNDS, clear, files, make_model, timed
from core import Lite

WAYS = ("all", "rank0", "disk")


def measure(lite: Lite, megabytes: int, repetitions: int, out: Path) -> None:
    model = make_model(lite, megabytes)
    size = sum(4 * parameter.numel() for parameter in model.parameters())
    shard = size // 4 + 1
    paths = {"all": out / "all", "rank0": out / "rank0"}
    disk: list[float] = [0.0, 0.0]

    def measure_disk() -> None:
        if lite.is_global_zero:
            disk[:] = disk_speed(out, size)

    samples: dict[str, list[float]] = {way: [] for way in (*WAYS, "disk_read", "load")}
    warmup = WARMUP_ROUNDS if repetitions > 1 else 0
    for repetition in range(warmup + repetitions):
        measured: dict[str, float] = {}
        for index in range(len(WAYS)):
            way = WAYS[(repetition + index) % len(WAYS)]
            if way == "disk":
                timed(lite, measure_disk)
                measured["disk"], measured["disk_read"] = disk
                continue
            clear(lite, paths[way])
            measured[way] = timed(lite, partial(save_weights, model, paths[way], max_shard_size=shard, writers=way))
        if lite.is_global_zero:
            _evict(paths["all"])
        measured["load"] = timed(lite, partial(_load, model, paths["all"]))
        if repetition >= warmup:
            for way, seconds in measured.items():
                samples[way].append(seconds)
    if lite.is_global_zero:
        report = {"samples": samples, "state_bytes": size, "files": {way: files(path) for way, path in paths.items()}}
        (out / "report.json").write_text(json.dumps(report))


def _load(model: torch.nn.Module, path: Path) -> None:
    load_weights(model, path)


def main(lite: Lite, megabytes: int, repetitions: int, out: Path) -> None:
    torch.set_num_threads(1)
    measure(lite, megabytes, repetitions, out)
    gc.collect()  # free the fsdp model (held in reference cycles) before the strategy destroys the group


if __name__ == "__main__":
    megabytes, repetitions, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    Lite(accelerator="cpu", strategy="fsdp", devices=2, plugins=["safetensors"]).launch(
        main, megabytes, repetitions, out
    )
