"""Peers: benchmark 1 (step overhead against a raw loop) for Lightning Fabric, the Lightning Trainer and
Hugging Face Accelerate, in their own environment (``make bench-peers``), written to bench/results-peers.json.

``python -m bench`` adds these rows to bench/results.md when the file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

import attrs

from bench._harness import Result, machine_description
from bench.overhead import block_command, block_note, paired_ratio, run_blocks

PY = sys.executable
HERE = Path(__file__).resolve().parent
TORCHRUN = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
CRASHES: dict[str, int] = {}
PEERS = {"fabric": "Lightning Fabric", "lightning": "Lightning Trainer", "accelerate": "HF Accelerate"}


# Ours, measured in the same alternation with the project's own environment (the same torch build).
OURS = {"lite": ("Lite", "fabric"), "trainer": ("Trainer", "lightning")}


def _run(command: list[str], mode: str) -> float:
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


def _peer_command(mode: str, steps: int, ddp: bool) -> list[str]:
    args = ["-m", "bench.peers_worker", mode, str(steps), *(["--ddp"] if ddp else [])]
    return [*TORCHRUN, *args] if ddp else [PY, *args]


def _our_command(python: str, mode: str, steps: int, ddp: bool) -> list[str]:
    # Lite and the Trainer start their own second process, as a user's script does.
    return [python, "-m", "bench.overhead_worker", mode, str(steps), *(["--ddp"] if ddp else [])]


def _microseconds(samples: list[float]) -> list[int]:
    return [round(sample * 1e6) for sample in samples]


def measure(steps: int, repetitions: int, ddp: bool, ours_python: str | None) -> dict[str, list[float]]:
    """One alternation per repetition: raw, every peer, then ours; the samples of each, in seconds per step."""
    commands = {"raw": _peer_command("raw", steps, ddp)}
    commands.update({mode: _peer_command(mode, steps, ddp) for mode in PEERS})
    if ours_python is not None:
        commands.update({mode: _our_command(ours_python, mode, steps, ddp) for mode in OURS})
    samples: dict[str, list[float]] = {mode: [] for mode in commands}
    for _ in range(repetitions):
        for mode, command in commands.items():
            samples[mode].append(_run(command, mode))
    return samples


def rows(samples: dict[str, list[float]], ddp: bool) -> list[Result]:
    layout = "2-process DDP over gloo" if ddp else "single process"
    raw = statistics.median(samples["raw"])
    results = []
    for mode, label in PEERS.items():
        note = f"samples raw {_microseconds(samples['raw'])} us, peer {_microseconds(samples[mode])} us"
        crashed = CRASHES.pop(mode, 0)
        if crashed:
            note += f"; {crashed} of the runs aborted at exit after printing the timing (gloo group left alive)"
        results.append(Result(
            f"peer: step time, {label} vs raw loop ({layout})", statistics.median(samples[mode]), raw, "s",
            "ours below every peer", note=note,
        ))
    for mode, (label, peer) in OURS.items():
        if mode not in samples:
            continue
        ours, theirs = statistics.median(samples[mode]), statistics.median(samples[peer])
        results.append(Result(
            f"head to head: {label} vs {PEERS[peer]} ({layout}, same alternation)", ours, theirs, "s", "< 1x",
            met=ours < theirs,
            note=f"against the same raw loop: ours {ours / raw:.3f}x, {PEERS[peer]} {theirs / raw:.3f}x; "
            f"samples ours {_microseconds(samples[mode])} us",
        ))
    return results


BLOCK_PEERS = ("fabric", "accelerate")  # the Lightning Trainer owns its loop: it cannot alternate with raw


def in_job_rows(steps: int, blocks: int, ddp: bool, ours_python: str | None) -> list[Result]:
    """Each of Fabric, Accelerate and Lite against the raw loop in one job of its own, alternating blocks.

    The ratios are precise to about 1 % (see ``overhead_worker.alternate_blocks``), so they can be compared
    across jobs, which separate-process samples under DDP cannot.
    """
    layout = "2-process DDP over gloo" if ddp else "single process"
    env = {"PYTHONPATH": str(HERE.parent)}
    ratios, results = {}, []
    for mode in BLOCK_PEERS:
        command = block_command(PY, "bench.peers_worker", mode, steps, blocks, ddp)
        samples = run_blocks([*TORCHRUN, *command[1:]] if ddp else command, env)
        ratios[mode] = paired_ratio(samples)
        results.append(Result(
            f"peer, in one job: step time, {PEERS[mode]} vs raw loop ({layout}, alternating blocks)",
            statistics.median(samples["framework"]), statistics.median(samples["raw"]), "s", "ours below every peer",
            note=block_note(samples, steps),
        ))
    if ours_python is not None:
        lite = paired_ratio(run_blocks(block_command(ours_python, "bench.overhead_worker", "interleaved", steps,
                                                     blocks, ddp), env))
        for mode in BLOCK_PEERS:
            results.append(Result(
                f"head to head, each in one job: Lite's ratio vs {PEERS[mode]}'s ({layout})", lite, ratios[mode],
                "x", "< 1x", met=lite < ratios[mode],
                note=f"median paired block ratios against the raw loop: Lite {lite:.3f}x, {PEERS[mode]} "
                f"{ratios[mode]:.3f}x",
            ))
    return results


def run(steps: int, repetitions: int, ours_python: str | None) -> list[Result]:
    results = []
    for ddp in (False, True):
        found = rows(measure(steps, repetitions + (2 if ddp else 0), ddp, ours_python), ddp)
        found += in_job_rows(steps, 15, ddp, ours_python)
        for result in found:
            results.append(result)
            print(f"  {result.name}: ratio {result.ratio:.3f}x", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repetitions", type=int, default=7, help="single process; DDP runs two more")
    parser.add_argument(
        "--ours-python", default=str(HERE.parent / ".venv" / "bin" / "python"),
        help="the project's environment, which runs Lite and the Trainer in the same alternation",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results-peers.json")
    args = parser.parse_args()
    ours = args.ours_python if Path(args.ours_python).exists() else None
    if ours is None:
        print(f"no {args.ours_python}: only the peers are measured (run make setup for the head-to-head rows)")
    results = run(args.steps, args.repetitions, ours)
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
