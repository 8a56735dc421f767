"""Step overhead: the same MLP and data in a raw loop, under Lite and under the Trainer.

Each configuration runs in a fresh process (``bench/overhead_worker.py``) that times steady-state steps;
raw and candidate alternate (A B A B ...) and the medians are compared.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence

from bench._harness import Result, alternate

PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]


def _seconds_per_step(command: Sequence[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}")
    line = next(line for line in completed.stdout.splitlines() if line.startswith('{"mode"'))
    return float(json.loads(line)["seconds_per_step"])


def _raw_sample(steps: int, ddp: bool) -> float:
    return _seconds_per_step(_worker("raw", steps, ddp))


def _worker(mode: str, steps: int, ddp: bool) -> list[str]:
    args = ["-m", "bench.overhead_worker", mode, str(steps), *(["--ddp"] if ddp else [])]
    if ddp and mode == "raw":
        return [*TORCHRUN, *args]
    return [PY, *args]


def _compare(
    candidate: str, steps: int, repetitions: int, ddp: bool, target: float, label: str,
    baseline: Callable[[], float],
) -> Result:
    """Candidate against ``baseline`` (one sample of the raw loop per call), A B A B ..."""
    raw_s, ours_s, raw_all, ours_all = alternate(
        baseline, lambda: _seconds_per_step(_worker(candidate, steps, ddp)), repetitions
    )
    return Result(
        f"step time, {label} vs raw loop ({'2-process DDP over gloo' if ddp else 'single process'})",
        ours_s, raw_s, "s", f"<= {target:.2f}x", met=ours_s / raw_s <= target,
        note=f"samples raw {[round(s * 1e6) for s in raw_all]} us, ours {[round(s * 1e6) for s in ours_all]} us",
    )


def block_command(python: str, module: str, mode: str, steps: int, blocks: int, ddp: bool) -> list[str]:
    return [python, "-m", module, mode, str(steps), "--blocks", str(blocks), *(["--ddp"] if ddp else [])]


def run_blocks(command: Sequence[str], env: dict[str, str] | None = None) -> dict[str, list[float]]:
    """Run one in-job alternation (``overhead_worker.alternate_blocks``) and return its block samples."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    line = next((line for line in completed.stdout.splitlines() if line.startswith('{"mode"')), None)
    if line is None:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}")
    samples: dict[str, list[float]] = json.loads(line)
    return samples


def paired_ratio(samples: dict[str, list[float]]) -> float:
    """The median over blocks of framework / raw, each pair measured back to back."""
    return statistics.median(b / a for a, b in zip(samples["raw"], samples["framework"], strict=True))


def block_note(samples: dict[str, list[float]], steps: int) -> str:
    raw, framework = samples["raw"], samples["framework"]
    return (
        f"{len(raw)} blocks of {steps} steps each; median of the paired block ratios {paired_ratio(samples):.3f}x; "
        f"samples raw {[round(s * 1e6) for s in raw]} us, framework {[round(s * 1e6) for s in framework]} us"
    )


def _interleaved(steps: int, blocks: int, ddp: bool) -> Result:
    """Lite against the raw loop in one job (see ``overhead_worker.interleaved``): block medians."""
    samples = run_blocks(block_command(PY, "bench.overhead_worker", "interleaved", steps, blocks, ddp))
    raw_s, ours_s = statistics.median(samples["raw"]), statistics.median(samples["framework"])
    layout = "2-process DDP over gloo" if ddp else "single process"
    return Result(
        f"step time, Lite vs raw loop ({layout}, alternating blocks in one job)", ours_s, raw_s, "s",
        "<= 1.02x", met=ours_s / raw_s <= 1.02, note=block_note(samples, steps),
    )


def run(scale: int) -> list[Result]:
    """``scale`` is the number of timed steps; repetitions are 7 (9 for DDP, the noisier layout) at full
    size and 1 when tiny."""
    results = []
    from bench.overhead_worker import MODES

    for ddp in (False, True):
        repetitions = (9 if ddp else 7) if scale >= 100 else 1
        baseline: Callable[[], float] = functools.partial(_raw_sample, scale, ddp)
        if repetitions == 1:  # a tiny run only keeps the code paths alive: one raw job serves every candidate
            baseline = functools.cache(baseline)
        for mode, target, label in (
            ("lite", 1.02, "Lite"),
            ("trainer", 1.05, "Trainer (logger, checkpoints, progress bar off)"),
            ("trainer_full", 1.05, "Trainer (logger, checkpoints, progress bar on)"),
        ):
            # Tiny DDP: the Trainer candidates are the single-process ones under strategy="ddp" (the Trainer's own
            # tests run that); Lite keeps the separate-process DDP path alive.
            tiny_ddp_trainer = repetitions == 1 and ddp and mode != "lite"
            if mode in MODES and not tiny_ddp_trainer:
                results.append(
                    _compare(mode, scale, repetitions, ddp=ddp, target=target, label=label, baseline=baseline)
                )
    for ddp in (False, True):
        results.append(_interleaved(scale, 15 if scale >= 100 else 1, ddp))
    return results
