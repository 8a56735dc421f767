"""A 2-process ddp job that reports where its ranks met: ``python rendezvous_job.py OUT``."""

import json
import os
import sys
from pathlib import Path

import torch

from core import Lite

INHERITED = os.environ.get("CORE_LISTEN_FD")  # a listening socket handed down by python -m core.run


def main(lite: Lite, out: Path) -> None:
    total = lite.all_reduce(torch.tensor([float(lite.global_rank + 1)]), reduce_op="sum")
    report = {"rank": lite.global_rank, "sum": total.item(), "port": os.environ["MASTER_PORT"],
              "job": os.environ.get("CORE_DDP_JOB"), "inherited": INHERITED}
    (out / f"rank-{lite.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    Lite(accelerator="cpu", strategy=sys.argv[2] if len(sys.argv) > 2 else "ddp", devices=2).launch(
        main, Path(sys.argv[1])
    )
