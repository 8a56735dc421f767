"""A small training job for the core-ddp tests, with a failure that can be planted on one rank.

    python ddp_job.py --strategy ddp --devices 2 --steps 20 --fail raise --fail-rank 1 --fail-step 10 --out DIR

Each rank prints ``RESULT rank=<global> world=<size> returned=<value>`` when its function returns, so a
test sees which processes ran. The failing rank writes the time of its failure to DIR/failed_at first.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
import weakref
from pathlib import Path

import torch
import torch.distributed as dist

import core


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=None, help="DDPStrategy(timeout=...) in seconds")
    parser.add_argument("--fail", choices=["none", "raise", "kill", "sleep"], default="none")
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--no-function", action="store_true", help="use lite.launch() and go on in the script")
    parser.add_argument("--repeat", type=int, default=1, help="run this many Lites one after the other")
    return parser.parse_args()


# The world process group of the last run, to check that teardown let it be freed (see the clean-exit test).
WORLD: list[weakref.ref[object]] = []


def fail_here(args: argparse.Namespace, global_rank: int, step: int) -> None:
    if args.fail == "none" or global_rank != args.fail_rank or step != args.fail_step:
        return
    (args.out / "failed_at").write_text(repr(time.time()))
    if args.fail == "raise":
        raise RuntimeError(f"planned failure on rank {global_rank} at step {step}")
    if args.fail == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    stalled_rank_sleeps_here()


def stalled_rank_sleeps_here() -> None:
    """"sleep": stop participating without dying (the timeout's message names this function, from this rank)."""
    time.sleep(3600)


def train(lite: core.Lite, args: argparse.Namespace) -> str:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    WORLD[:] = [weakref.ref(dist.group.WORLD)]
    (args.out / f"ready-{lite.global_rank}").write_text(str(os.getpid()))
    for step in range(args.steps):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        lite.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        fail_here(args, lite.global_rank, step)
        lite.all_reduce(loss.detach())
    return f"{lite.global_rank}/{lite.world_size}"


def strategy(args: argparse.Namespace) -> object:
    if args.timeout is None:
        return args.strategy
    from core_ddp import DDPStrategy

    start_method = {"ddp": "popen", "ddp_spawn": "spawn", "ddp_fork": "fork"}[args.strategy]
    return DDPStrategy(timeout=args.timeout, start_method=start_method)


def main() -> int:
    args = parse_args()
    for _ in range(args.repeat):
        lite = core.Lite(accelerator="cpu", strategy=strategy(args), devices=args.devices, num_nodes=args.num_nodes)
        if args.no_function:
            lite.launch()
            returned: str | None = train(lite, args)
        else:
            try:
                returned = lite.launch(train, args)
            except core.CoreError:  # ddp_spawn / ddp_fork: a rank failed, the caller learns it here
                (args.out / "raised_at").write_text(repr(time.time()))
                raise
        # One write, so that the lines of two ranks sharing a pipe never interleave.
        lines = f"RESULT rank={lite.global_rank} world={lite.world_size} returned={returned}\n"
        if WORLD:  # this process ran a rank; ``lite`` still holds the model, which must not hold the group
            gc.collect()
            lines += f"GROUP rank={lite.global_rank} freed={WORLD[0]() is None}\n"
        sys.stdout.write(lines)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
