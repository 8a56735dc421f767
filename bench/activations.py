"""What each memory lever saves per rank on the bench GPT, 2 ranks on CPU (bench/activations_worker.py).

Four jobs: ``ddp``, ``fsdp`` (each Block a unit), ``fsdp`` + activation checkpointing of every Block, and that with
``cpu_offload``. Two kinds of figures per job, the largest rank's: the peak bytes autograd saved for backward in a step
(the activations: what checkpointing removes) and the peak resident memory (``ru_maxrss``, the ~400 MB runtime
included, which no lever shrinks). Each row compares a configuration with ``ddp``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from bench._harness import Result
from bench._jobs import run_job

CONFIGS = ("ddp", "fsdp", "fsdp_ac", "fsdp_ac_offload")
LABELS = {"ddp": "ddp", "fsdp": "fsdp", "fsdp_ac": "fsdp + AC", "fsdp_ac_offload": "fsdp + AC + cpu_offload"}
FULL, TINY = (6, 256, 256), (2, 32, 16)  # layers, dim, context


def _job(config: str, shape: tuple[int, int, int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run_job("bench.activations_worker", [config, *map(str, shape), tmp], timeout=600)
        report: dict[str, Any] = json.loads((Path(tmp) / f"report-{config}.json").read_text())
    return report


def _largest(report: dict[str, Any], key: str) -> float:
    return float(max(rank[key] for rank in report["ranks"]))


def run(layers: int) -> list[Result]:
    shape = FULL if layers >= 4 else TINY
    configs = CONFIGS if layers >= 4 else ("ddp", "fsdp_ac")  # the tiny smoke run (make test) starts two jobs
    reports = {config: _job(config, shape) for config in configs}
    saved = {config: _largest(report, "saved_bytes") / 2**20 for config, report in reports.items()}
    peak = {config: _largest(report, "peak_mb") for config, report in reports.items()}
    described = f"bench GPT {shape[0]} layers x {shape[1]}, context {shape[2]}, 2 ranks"
    listing = ", ".join(f"{LABELS[config]} {saved[config]:.1f} MB" for config in configs)
    peaks = ", ".join(f"{LABELS[config]} {peak[config]:.0f} MB" for config in configs)
    rows = [
        Result(
            f"bytes saved for backward per rank, fsdp + AC (every Block) vs ddp, {described}",
            saved["fsdp_ac"], saved["ddp"], "MB", "below 0.4", met=saved["fsdp_ac"] < 0.4 * saved["ddp"],
            note=f"peak per step, largest rank, counted with saved_tensors_hooks: {listing}",
        ),
    ]
    for config in configs[1:]:
        rows.append(Result(
            f"peak resident memory per rank (ru_maxrss), {LABELS[config]} vs ddp, {described}",
            peak[config], peak["ddp"], "MB", "below 1 (lower is better)", met=peak[config] < peak["ddp"],
            note=f"{peaks}; the Python/torch runtime (~400 MB per process) is in every figure",
        ))
    return rows
