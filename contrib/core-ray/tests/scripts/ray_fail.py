"""A 2-rank ddp job on Ray whose rank 1 fails mid-run.

    python ray_fail.py OUT kill|raise

Every rank records its pid and its last finished step in OUT/rank-N.json. ``kill``: rank 1 waits to be killed by
the test (SIGKILL) while the job trains; ``raise``: rank 1 raises at step 5. The job would take minutes to train
its STEPS steps, so a run that ends at all ended because of the failure.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from core import Lite

STEPS = 200_000


def train(lite: Lite, out: Path, mode: str) -> int:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    record = out / f"rank-{lite.global_rank}.json"
    for step in range(STEPS):
        optimizer.zero_grad()
        lite.backward(module(torch.randn(4, 8)).square().mean())
        optimizer.step()
        if step % 10 == 0:
            temporary = record.with_suffix(".tmp")
            temporary.write_text(json.dumps({"pid": os.getpid(), "step": step}))
            os.replace(temporary, record)
        if mode == "raise" and lite.global_rank == 1 and step == 5:
            raise ValueError("rank 1 gave up at step 5")
    return STEPS


if __name__ == "__main__":
    out = Path(sys.argv[1])
    Lite(accelerator="cpu", strategy="ddp", devices=2, plugins=["ray"]).launch(train, out, sys.argv[2])
