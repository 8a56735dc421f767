"""Checkpoints on 2 ranks: the ``distributed`` checkpoint_io (core-dcp) writing an ``fsdp`` model's shards.

One 2-process job (bench/distributed_save_worker.py) alternates, per repetition, a full save (every rank
gathers, rank 0 writes one file with ``torch``), ``Lite.save`` through ``distributed`` (each rank writes its
shards) and a plain ``torch.distributed.checkpoint.save`` of the same shards. Two rows come out of it: the
sharded save against the full one, and our checkpoint_io against raw DCP.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from bench._harness import Result
from bench._jobs import run_job


def _describe(files: dict[str, int]) -> str:
    return ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in files.items())


def _samples(values: list[float]) -> str:
    return "/".join(f"{value * 1000:.0f}" for value in values) + " ms"


def _check_sharded(files: dict[str, int]) -> None:
    data = [name for name in files if name.endswith(".distcp")]
    if len(data) != 2 or ".metadata" not in files:
        raise RuntimeError(f"expected .metadata and one .distcp file per rank from the sharded save, got {files}")


def run(megabytes: int) -> list[Result]:
    repetitions = 7 if megabytes >= 100 else 1
    with tempfile.TemporaryDirectory() as tmp:
        arguments = [str(megabytes), str(repetitions), tmp]
        run_job("bench.distributed_save_worker", arguments, timeout=120 + 30 * repetitions)
        report = json.loads((Path(tmp) / "report.json").read_text())
    samples: dict[str, list[float]] = report["samples"]
    files: dict[str, dict[str, int]] = report["files"]
    _check_sharded(files["sharded"])
    full, sharded, raw = (statistics.median(samples[way]) for way in ("full", "sharded", "raw_dcp"))
    size = report["state_bytes"] / 1e6
    return [
        Result(
            f"`distributed` save on 2 ranks: fsdp, each rank writes its shards ({size:.0f} MB) vs gathering the full "
            f"state and rank 0 writing one file with `torch`", sharded, full, "s",
            "below 1x (the sharded save is the fast path)", met=sharded / full < 1.0,
            note=f"wall time until both ranks finished, each sample a new checkpoint; sharded wrote "
                 f"{_describe(files['sharded'])}; full wrote {_describe(files['full'])}; samples sharded "
                 f"{_samples(samples['sharded'])}, full {_samples(samples['full'])}",
        ),
        Result(
            f"`distributed` checkpoint_io save on 2 ranks (fsdp, {size:.0f} MB) vs plain `dcp.save` of the same "
            f"shards", sharded, raw, "s", "close to 1x (atomic rename, the skeleton entry)", met=sharded / raw < 1.25,
            note=f"dcp.save wrote {_describe(files['raw_dcp'])}; samples {_samples(samples['raw_dcp'])}",
        ),
    ]
