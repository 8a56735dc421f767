"""A real workload: a small GPT trained for a fixed number of steps on 2 ranks (bench/gpt_worker.py).

Tokens/s and peak resident memory per rank of each Lite strategy against raw ``DistributedDataParallel`` under
torchrun, eager and ``torch.compile``'d. One round runs every configuration once (raw first); rounds repeat and
medians are compared, so a slow drift of the machine is spread over all configurations (A B C ... A B C ...).
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from bench._harness import Result
from bench.overhead import PY, TORCHRUN, run_blocks

STRATEGIES = ("ddp", "fsdp", "model_parallel_1x2", "model_parallel_2x1", "deepspeed_stage_2", "deepspeed_stage_3")
COMPILED = ("ddp", "fsdp")  # the strategies also run compiled (torch.compile before setup)
FULL = (6, 256, 128)  # layers, d_model, context
TINY = (1, 32, 16)
TINY_STRATEGIES = ("ddp", "fsdp")


def _command(mode: str, shape: tuple[int, int, int], steps: int, compile: bool) -> list[str]:
    arguments = ["-m", "bench.gpt_worker", mode, *(str(value) for value in shape), str(steps)]
    arguments += ["--compile"] if compile else []
    return [*TORCHRUN, *arguments] if mode == "raw" else [PY, *arguments]


def _skipped(mode: str) -> str | None:
    """Why a configuration cannot run here (None: it can)."""
    if mode.startswith("model_parallel") and importlib.util.find_spec("core_model_parallel") is None:
        return "core-model-parallel is not installed (pip install -e plugins/core-model-parallel)"
    if mode.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed"
    return None


def measure(shape: tuple[int, int, int], steps: int, rounds: int, tiny: bool) -> dict[str, list[dict[str, Any]]]:
    """Every runnable configuration ``rounds`` times, round-robin; ``key -> samples`` (key ``mode[+compile]``).

    ``tiny`` (the smoke test) runs only raw, ``ddp`` and ``fsdp`` eager, to stay within seconds."""
    strategies = TINY_STRATEGIES if tiny else STRATEGIES
    configurations = [("raw", False), *((mode, False) for mode in strategies if _skipped(mode) is None)]
    if not tiny:
        configurations += [("raw", True), *((mode, True) for mode in COMPILED)]
    samples: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for mode, compile in configurations:
            key = mode + ("+compile" if compile else "")
            print(f"  gpt {key} ...", flush=True)
            samples.setdefault(key, []).append(run_blocks(_command(mode, shape, steps, compile)))
    return samples


def _median(samples: list[dict[str, Any]], field: str) -> float:
    if field == "peak_mb":
        return statistics.median(max(sample["peak_mb"]) for sample in samples)
    return statistics.median(float(sample[field]) for sample in samples)


def rows(samples: dict[str, list[dict[str, Any]]], shape: tuple[int, int, int], steps: int) -> list[Result]:
    layers, dim, context = shape
    millions = samples["raw"][0]["parameters"] / 1e6
    model = f"GPT {layers}x{dim}, context {context}, {millions:.1f} M parameters, 2 ranks, {steps} steps"
    results = []
    for key, runs in samples.items():
        if key.startswith("raw"):
            continue
        compiled = key.endswith("+compile")
        reference = samples["raw+compile" if compiled else "raw"]
        label = key.removesuffix("+compile") + (" compiled" if compiled else " eager")
        ours, raw = _median(runs, "tokens_per_s"), _median(reference, "tokens_per_s")
        is_ddp = key.startswith("ddp")
        results.append(Result(
            f"tokens/s, Lite {label} vs raw DDP {'compiled' if compiled else 'eager'} ({model})", ours, raw,
            "tokens/s", ">= 0.99x" if is_ddp else "report", met=ours / raw >= 0.99 if is_ddp else None,
            note=f"{len(runs)} runs each; samples ours {[round(r['tokens_per_s']) for r in runs]}, "
                 f"raw {[round(r['tokens_per_s']) for r in reference]}; global batch 8 sequences",
        ))
        peak, raw_peak = _median(runs, "peak_mb"), _median(reference, "peak_mb")
        results.append(Result(
            f"peak resident memory per rank, Lite {label} vs raw DDP ({model})", peak, raw_peak, "MB", "report",
            note="ru_maxrss of the largest rank, Python/torch runtime included (~300 MB per process)",
        ))
    return results


def run(steps: int) -> list[Result]:
    shape = FULL if steps >= 10 else TINY
    samples = measure(shape, steps, rounds=3 if steps >= 10 else 1, tiny=steps < 10)
    for mode in STRATEGIES:
        reason = _skipped(mode)
        if reason is not None:
            print(f"  gpt {mode}: skipped, {reason}", flush=True)
    return rows(samples, shape, steps)
