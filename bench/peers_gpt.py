"""Peers on the GPT workload: Lightning Fabric and HF Accelerate (DDP) against raw DDP and Lite, eager and compiled.

Run in the peers' environment (``make bench-peers``), like bench/peers.py: raw DDP and the peers run there under
torchrun, Lite ``ddp`` runs in the project's environment (``--ours-python``), all with the same torch build and
the same model, data and global batch (bench/gpt_worker.py). One round runs every configuration once; rounds
repeat and medians are compared. The rows are merged into bench/results-peers.json (rows of the same name are
replaced), which ``python -m bench`` adds to bench/results.md and the tokens/s plot.

Fabric's ``fsdp`` refuses a CPU accelerator ("FSDP is only available on GPU"), so only DDP is compared here.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

import attrs

from bench._harness import Result, machine_description
from bench.gpt import FULL, _median
from bench.overhead import PY, TORCHRUN, run_blocks

HERE = Path(__file__).resolve().parent
PEERS = {"fabric_ddp": "Lightning Fabric ddp", "accelerate_ddp": "HF Accelerate ddp"}


def _command(python: str, mode: str, steps: int, compile: bool) -> list[str]:
    arguments = ["-m", "bench.gpt_worker", mode, *(str(value) for value in FULL), str(steps)]
    arguments += ["--compile"] if compile else []
    if mode == "ddp":  # Lite starts its own second process
        return [python, *arguments]
    return [*TORCHRUN, *arguments]


def measure(steps: int, rounds: int, ours_python: str | None) -> dict[str, list[dict[str, Any]]]:
    """``mode[+compile] -> samples``, every configuration once per round."""
    modes = ["raw", *PEERS, *(["ddp"] if ours_python is not None else [])]
    samples: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for compile in (False, True):
            for mode in modes:
                key = mode + ("+compile" if compile else "")
                print(f"  gpt {key} ...", flush=True)
                python = ours_python if mode == "ddp" and ours_python is not None else PY
                samples.setdefault(key, []).append(run_blocks(_command(python, mode, steps, compile),
                                                              {"PYTHONPATH": str(HERE.parent)}))
    return samples


def rows(samples: dict[str, list[dict[str, Any]]], steps: int) -> list[Result]:
    layers, dim, context = FULL
    millions = samples["raw"][0]["parameters"] / 1e6
    model = f"GPT {layers}x{dim}, context {context}, {millions:.1f} M parameters, 2 ranks, {steps} steps"
    results = []
    for compile in (False, True):
        suffix, how = ("+compile", "compiled") if compile else ("", "eager")
        raw = _median(samples["raw" + suffix], "tokens_per_s")
        for mode, label in PEERS.items():
            runs = samples[mode + suffix]
            theirs = _median(runs, "tokens_per_s")
            results.append(Result(
                f"tokens/s, peer {label} {how} vs raw DDP {how} (peers run; {model})", theirs, raw, "tokens/s",
                "report", note=f"{len(runs)} runs; samples {[round(r['tokens_per_s']) for r in runs]}, raw "
                f"{[round(r['tokens_per_s']) for r in samples['raw' + suffix]]}; global batch 8 sequences",
            ))
            if "ddp" + suffix in samples:
                ours = _median(samples["ddp" + suffix], "tokens_per_s")
                results.append(Result(
                    f"head to head, GPT tokens/s: Lite ddp {how} vs {label} {how} (same rounds; {model})", ours,
                    theirs, "tokens/s", ">= 0.99x (no peer ahead beyond 1 % noise)", met=ours / theirs >= 0.99,
                    note=f"against the same raw DDP: Lite {ours / raw:.3f}x, {label} {theirs / raw:.3f}x; samples "
                    f"Lite {[round(r['tokens_per_s']) for r in samples['ddp' + suffix]]}",
                ))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers_gpt")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ours-python", default=str(HERE.parent / ".venv" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=HERE / "results-peers.json")
    args = parser.parse_args()
    ours = args.ours_python if Path(args.ours_python).exists() else None
    results = rows(measure(args.steps, args.rounds, ours), args.steps)
    for result in results:
        print(f"  {result.name}: ratio {result.ratio:.3f}x", flush=True)
    payload = json.loads(args.out.read_text()) if args.out.exists() else {"results": []}
    fresh = {result.name for result in results}
    payload["results"] = [row for row in payload["results"] if row["name"] not in fresh]
    payload["results"] += [attrs.asdict(result) for result in results]
    import accelerate  # type: ignore[import-not-found]
    import lightning  # type: ignore[import-not-found]
    import torch

    payload["gpt"] = {
        "date": date.today().isoformat(),
        "machine": machine_description(),
        "versions": {"torch": torch.__version__, "lightning": lightning.__version__,
                     "accelerate": accelerate.__version__},
    }
    payload.setdefault("date", payload["gpt"]["date"])
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
