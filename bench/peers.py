"""Peers: benchmark 1 (step overhead against a raw loop) for Lightning Fabric, the Lightning Trainer and
Hugging Face Accelerate, in their own environment (``make bench-peers``), written to bench/results-peers.json.

``python -m bench`` adds these rows to bench/results.md when the file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import attrs

from bench._harness import Result, alternate, machine_description

PY = sys.executable
HERE = Path(__file__).resolve().parent
TORCHRUN = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
CRASHES: dict[str, int] = {}
PEERS = {"fabric": "Lightning Fabric", "lightning": "Lightning Trainer", "accelerate": "HF Accelerate"}


def _seconds_per_step(mode: str, steps: int, ddp: bool) -> float:
    args = ["-m", "bench.peers_worker", mode, str(steps), *(["--ddp"] if ddp else [])]
    command = [*TORCHRUN, *args] if ddp else [PY, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    line = next((line for line in completed.stdout.splitlines() if line.startswith('{"mode"')), None)
    if line is None:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}")
    if completed.returncode != 0:
        # The timing was printed, then the job died at shutdown (gloo's "terminate called without an active
        # exception" when a process group outlives the run): the figure stands, the crash is reported.
        CRASHES[mode] = CRASHES.get(mode, 0) + 1
    return float(json.loads(line)["seconds_per_step"])


def _compare(mode: str, label: str, steps: int, repetitions: int, ddp: bool) -> Result:
    raw_s, peer_s, raw_all, peer_all = alternate(
        lambda: _seconds_per_step("raw", steps, ddp), lambda: _seconds_per_step(mode, steps, ddp), repetitions
    )
    layout = "2-process DDP over gloo" if ddp else "single process"
    samples = f"samples raw {[round(s * 1e6) for s in raw_all]} us, peer {[round(s * 1e6) for s in peer_all]} us"
    crashed = CRASHES.pop(mode, 0) + CRASHES.pop("raw", 0)
    if crashed:
        samples += f"; {crashed} of the runs aborted at exit after printing the timing (gloo group left alive)"
    return Result(
        f"peer: step time, {label} vs raw loop ({layout})", peer_s, raw_s, "s", "ours below every peer", note=samples
    )


def run(steps: int, repetitions: int) -> list[Result]:
    results = []
    for ddp in (False, True):
        for mode, label in PEERS.items():
            results.append(_compare(mode, label, steps, repetitions, ddp))
            print(f"  {results[-1].name}: ratio {results[-1].ratio:.3f}x", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results-peers.json")
    args = parser.parse_args()
    results = run(args.steps, args.repetitions)
    import accelerate  # type: ignore[import-not-found]
    import lightning  # type: ignore[import-not-found]
    import torch

    versions = {"torch": torch.__version__, "lightning": lightning.__version__, "accelerate": accelerate.__version__}
    payload = {
        "date": date.today().isoformat(),
        "machine": machine_description(),
        "versions": versions,
        "results": [attrs.asdict(result) for result in results],
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
