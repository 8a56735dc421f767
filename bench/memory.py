"""Memory per rank of ``fsdp`` against ``ddp`` on 2 ranks, after one Adam step (bench/memory_worker.py).

Two rows from the same two jobs: the bytes of parameter, gradient and optimizer-state tensors each rank
holds (the sharded quantity, target about 0.5), and the peak resident memory, runtime included.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from bench._harness import Result
from bench._jobs import run_job

MIB = 1024 * 1024
HELD = ("parameters", "gradients", "optimizer_state")


def _job(strategy: str, width: int, depth: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run_job("bench.memory_worker", [strategy, str(width), str(depth), tmp], timeout=600)
        report: dict[str, Any] = json.loads((Path(tmp) / f"report-{strategy}.json").read_text())
    return report


def _held(rank: dict[str, float]) -> float:
    return sum(rank[key] for key in HELD)


def _breakdown(rank: dict[str, float]) -> str:
    return " + ".join(f"{rank[key] / MIB:.0f}" for key in HELD) + " MB"


def run(depth: int) -> list[Result]:
    width = 2048
    ddp, fsdp = _job("ddp", width, depth), _job("fsdp", width, depth)
    millions = ddp["parameters"] / 1e6
    ddp_rank = max(ddp["ranks"], key=_held)
    fsdp_rank = max(fsdp["ranks"], key=_held)
    ddp_held, fsdp_held = _held(ddp_rank) / MIB, _held(fsdp_rank) / MIB
    buckets = ddp_rank["ddp_buckets"] / MIB
    ddp_peak = max(rank["peak_mb"] for rank in ddp["ranks"])
    fsdp_peak = max(rank["peak_mb"] for rank in fsdp["ranks"])
    return [
        Result(
            f"parameters + gradients + Adam state held per rank, fsdp vs ddp, 2 ranks, {millions:.0f} M parameters",
            fsdp_held, ddp_held, "MB", "close to 0.5 (met below 0.6)", met=fsdp_held / ddp_held < 0.6,
            note=f"largest rank; parameters + gradients + optimizer state: fsdp {_breakdown(fsdp_rank)}, ddp "
                 f"{_breakdown(ddp_rank)}; DTensor shards count their local tensor, each storage once; ddp also "
                 f"holds {buckets:.0f} MB of gradient buckets (gradient_as_bucket_view=False), not counted: with "
                 f"them the ratio is {fsdp_held / (ddp_held + buckets):.3f}",
        ),
        Result(
            f"peak resident memory per rank (ru_maxrss), fsdp vs ddp, 2 ranks, {millions:.0f} M parameters + Adam",
            fsdp_peak, ddp_peak, "MB", "below 0.75 (the runtime is not sharded)", met=fsdp_peak / ddp_peak < 0.75,
            note="ru_maxrss includes the Python/torch runtime (~300-400 MB per process), which no strategy shards, "
                 "and transient buffers (fsdp's all-gathered layers, ddp's buckets)",
        ),
    ]
