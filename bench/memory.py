"""Memory: peak resident memory per rank of ``fsdp`` against ``ddp`` on 2 ranks, after one Adam step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench._harness import Result

SCRIPT = r"""
import json, resource, sys, torch
from core import Lite

def main(lite, width, depth):
    with lite.init_module(empty_init=True):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, optimizer = lite.setup(model, optimizer)
    loss = model(torch.randn(8, width)).square().mean()
    lite.backward(loss)
    optimizer.step()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = lite.all_gather(torch.tensor([peak_mb], dtype=torch.float64))
    params = sum(p.numel() for p in model.parameters())
    if lite.is_global_zero:
        print(json.dumps({"peaks_mb": peaks.flatten().tolist(), "params": params}), flush=True)

if __name__ == "__main__":
    strategy, width, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    Lite(accelerator="cpu", strategy=strategy, devices=2).launch(main, width, depth)
"""


def _peak(strategy: str, width: int, depth: int) -> tuple[float, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, strategy, str(width), str(depth)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{strategy} memory run failed:\n{completed.stderr[-3000:]}")
    record = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("{")))
    return max(record["peaks_mb"]), int(record["params"])


def run(depth: int) -> list[Result]:
    width = 2048
    ddp_mb, params = _peak("ddp", width, depth)
    fsdp_mb, _ = _peak("fsdp", width, depth)
    return [
        Result(
            f"peak memory per rank, fsdp vs ddp, 2 ranks, {params / 1e6:.0f} M parameters + Adam", fsdp_mb, ddp_mb,
            "MB", "close to 0.5 for parameters and optimizer state", met=fsdp_mb / ddp_mb < 0.75,
            note="ru_maxrss includes the Python/torch runtime (~300-400 MB per process), which no strategy shards",
        )
    ]
