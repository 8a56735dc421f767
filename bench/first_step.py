"""Start-up of a 2-process job: wall time from starting the command to the first optimizer step on rank 0,
``python script.py`` with ``strategy="ddp"`` (which starts its second process itself) against the same raw
loop under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench._harness import Result, alternate

PY = sys.executable
COMMANDS = {
    "raw": [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "bench.first_step_worker", "raw"],
    "lite": [PY, "-m", "bench.first_step_worker", "lite"],
}


def _to_first_step(mode: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.time()
    completed = subprocess.run(COMMANDS[mode], capture_output=True, text=True, env=env, timeout=300)
    if completed.returncode != 0:
        raise RuntimeError(f"{mode} first-step run failed:\n{completed.stderr[-3000:]}")
    line = next(line for line in completed.stdout.splitlines() if line.startswith('{"first_step_at"'))
    return float(json.loads(line)["first_step_at"]) - start


def run(repetitions: int) -> list[Result]:
    raw_s, ours_s, raw_all, ours_all = alternate(lambda: _to_first_step("raw"), lambda: _to_first_step("lite"),
                                                 repetitions)
    return [
        Result(
            "start to first optimizer step, 2 processes: script with strategy='ddp' vs raw loop under torchrun",
            ours_s, raw_s, "s", "no slower than torchrun", met=ours_s <= raw_s * 1.05,
            note=f"samples raw {[round(s, 2) for s in raw_all]} s, ours {[round(s, 2) for s in ours_all]} s",
        )
    ]
