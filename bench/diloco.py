"""DiLoCo on the benchmark's GPT: tokens/s and bytes between groups per step against Lite ``ddp`` (diloco_worker).

Two processes: ``ddp`` over both, against the diloco extension with 2 groups of 1 process (``H = 5``; with bf16
pseudo-gradients; streaming with 5 fragments). One round runs every configuration once (``ddp`` first); rounds
repeat and medians are compared. On one machine the "groups" share a loopback link, so the bytes row is the
figure that carries over to slow links between groups; tokens/s here says what the extension costs or saves on
this 2-core CPU, where a group of one process has no gradient all-reduce at all.
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from bench._harness import Result
from bench.diloco_worker import MODES, SYNC_EVERY
from bench.gpt import FULL, TINY
from bench.overhead import PY, run_blocks

LABELS = {
    "diloco": f"H={SYNC_EVERY}",
    "diloco_bf16": f"H={SYNC_EVERY}, bf16",
    "diloco_streaming": f"H={SYNC_EVERY}, streaming {SYNC_EVERY} fragments",
}


def _command(mode: str, shape: tuple[int, int, int], steps: int) -> list[str]:
    return [PY, "-m", "bench.diloco_worker", mode, *(str(value) for value in shape), str(steps)]


def measure(shape: tuple[int, int, int], steps: int, rounds: int, modes: list[str]) -> dict[str, list[dict[str, Any]]]:
    samples: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for mode in modes:
            print(f"  diloco {mode} ...", flush=True)
            samples.setdefault(mode, []).append(run_blocks(_command(mode, shape, steps)))
    return samples


def rows(samples: dict[str, list[dict[str, Any]]], shape: tuple[int, int, int], steps: int) -> list[Result]:
    layers, dim, context = shape
    millions = samples["ddp"][0]["parameters"] / 1e6
    model = f"GPT {layers}x{dim}, context {context}, {millions:.1f} M parameters, 2 processes, {steps} steps"
    ddp_tokens = statistics.median(float(run["tokens_per_s"]) for run in samples["ddp"])
    ddp_bytes = statistics.median(float(run["bytes_per_step"]) for run in samples["ddp"])
    results = []
    for mode, runs in samples.items():
        if mode == "ddp":
            continue
        label = LABELS[mode]
        tokens = statistics.median(float(run["tokens_per_s"]) for run in runs)
        sent = statistics.median(float(run["bytes_per_step"]) for run in runs)
        results.append(Result(
            f"DiLoCo tokens/s, Lite ddp + diloco ({label}, 2 groups x 1) vs Lite ddp ({model})", tokens, ddp_tokens,
            "tokens/s", "report",
            note=f"{len(runs)} runs each; samples diloco {[round(r['tokens_per_s']) for r in runs]}, "
                 f"ddp {[round(r['tokens_per_s']) for r in samples['ddp']]}; global batch 8 sequences",
        ))
        target = 1 / SYNC_EVERY / (2 if "bf16" in mode else 1)
        results.append(Result(
            f"DiLoCo bytes between groups per inner step ({label}) vs ddp's all-reduce ({model})", sent, ddp_bytes,
            "B", f"<= {target:.2f}x (H times fewer{', halved by bf16' if 'bf16' in mode else ''})",
            met=sent / ddp_bytes <= target + 1e-9,
            note="bytes one rank passed to the collectives between groups (the extension's count); ddp's counted by "
                 "a communication hook on 2 untimed steps",
        ))
    return results


def run(steps: int) -> list[Result]:
    if importlib.util.find_spec("core_diloco") is None:
        print("  diloco: skipped, core-diloco is not installed (pip install -e contrib/core-diloco)", flush=True)
        return []
    tiny = steps < 10
    shape = TINY if tiny else FULL
    modes = ["ddp", "diloco"] if tiny else list(MODES)
    return rows(measure(shape, steps, rounds=1 if tiny else 3, modes=modes), shape, steps)
