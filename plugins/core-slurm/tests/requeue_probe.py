"""A job that checkpoints on SLURM's requeue signal and resumes after the requeue (test_slurm_requeue.py).

``srun python requeue_probe.py DIR``: every task resolves core (the slurm environment is detected),
registers a save callback and counts steps, writing ``DIR/ready-<rank>`` once it is ready for the signal.
On SIGUSR1 each task writes ``DIR/checkpoint-<rank>.json`` and rank 0 requeues the job. After the restart
each task finds its checkpoint, writes ``DIR/resumed-<rank>.json`` and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from environment_probe import ProbeStrategy

import core


def main() -> int:
    directory = Path(sys.argv[1])
    rank = int(os.environ["SLURM_PROCID"])
    checkpoint = directory / f"checkpoint-{rank}.json"
    if checkpoint.exists():
        state = json.loads(checkpoint.read_text())
        resumed = {**state, "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0"))}
        (directory / f"resumed-{rank}.json").write_text(json.dumps(resumed))
        return 0

    active = core.resolve(accelerator="cpu", strategy=ProbeStrategy(), devices=int(os.environ["SLURM_NTASKS"]))
    assert active.config.environment == "slurm", active.config.environment
    step = 0

    def save() -> None:
        partial = checkpoint.with_suffix(".partial")
        partial.write_text(json.dumps({"step": step, "rank": rank, "saved_at": time.time()}))
        partial.replace(checkpoint)

    active.environment.set_requeue_callback(save)  # type: ignore[attr-defined]
    (directory / f"ready-{rank}").touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        step += 1
        time.sleep(0.01)
    return 1  # never signalled


if __name__ == "__main__":
    sys.exit(main())
