"""Every collective of the DDP strategy through Lite, on 2 ranks; each rank writes what it saw to DIR/rank-N.json.

    python ddp_collectives.py --strategy ddp --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

import core


def gathers(lite: core.Lite) -> dict[str, Any]:
    rank = lite.global_rank
    scalar = lite.all_gather(torch.tensor(rank))
    matrix = lite.all_gather(torch.full((2, 3), float(rank)))
    nested = lite.all_gather({"a": torch.tensor([rank, 10 + rank]), "b": [torch.ones(1) * rank]})
    source = torch.tensor([rank + 1.0], requires_grad=True)
    differentiable = lite.all_gather(source * 2, sync_grads=True)
    differentiable.sum().backward()
    return {
        "scalar": {"shape": list(scalar.shape), "values": scalar.tolist()},
        "matrix": {"shape": list(matrix.shape), "values": matrix.tolist()},
        "nested_a": nested["a"].tolist(),
        "nested_b": nested["b"][0].tolist(),
        "sync_grads": {
            "values": differentiable.tolist(), "grad": None if source.grad is None else source.grad.tolist()
        },
    }


def reductions(lite: core.Lite) -> dict[str, Any]:
    rank = lite.global_rank
    floats = torch.tensor([[rank + 1.0, -(rank + 1.0)], [10.0 * rank, 0.5]])
    results: dict[str, Any] = {}
    for op in ("sum", "mean", "max", "min"):
        reduced = lite.all_reduce(floats, reduce_op=op)
        results[op] = {"values": reduced.tolist(), "dtype": str(reduced.dtype)}
        ints = lite.all_reduce(torch.tensor([rank + 1, 7]), reduce_op=op)
        results[f"int_{op}"] = {"values": ints.tolist(), "dtype": str(ints.dtype)}
    results["scalar_sum"] = float(lite.all_reduce(torch.tensor(rank + 1.0), reduce_op="sum"))
    results["number_mean"] = float(lite.all_reduce(rank + 1, reduce_op="mean"))
    results["bf16_sum"] = {"values": lite.all_reduce(torch.tensor([rank + 1.0], dtype=torch.bfloat16),
                                                     reduce_op="sum").float().tolist()}
    original = torch.tensor([rank + 1.0])
    lite.all_reduce(original, reduce_op="sum")
    results["input_untouched"] = original.tolist()
    try:
        lite.all_reduce(original, reduce_op="product")
    except core.ConfigurationError as error:
        results["bad_op"] = str(error)
    return results


def broadcasts(lite: core.Lite) -> dict[str, Any]:
    rank = lite.global_rank
    payload: dict[str, Any] = {"from": rank, "tensor": torch.arange(3) * (rank + 1), "nested": [rank, {"x": "text"}]}
    received = lite.broadcast(payload, src=1)
    shaped = lite.broadcast(torch.ones(rank + 2), src=0)  # receivers hold a different shape
    return {
        "from": received["from"],
        "tensor": received["tensor"].tolist(),
        "nested": received["nested"],
        "shaped": list(shaped.shape),
    }


def barrier(lite: core.Lite) -> float:
    if lite.global_rank == 1:
        time.sleep(1.0)
    started = time.monotonic()
    lite.barrier("after-sleep")
    return time.monotonic() - started


def checkpoint(lite: core.Lite, directory: Path) -> dict[str, Any]:
    model = lite.setup(torch.nn.Linear(2, 2))
    path = directory / "model.ckpt"
    lite.save(path, {"model": model, "step": 7 + lite.global_rank})
    loaded = lite.load(path)
    return {"step": loaded["step"], "files": sorted(p.name for p in directory.glob("model.ckpt*"))}


def run(lite: core.Lite, directory: Path) -> None:
    report = {
        "rank": lite.global_rank,
        "world_size": lite.world_size,
        "gathers": gathers(lite),
        "reductions": reductions(lite),
        "broadcasts": broadcasts(lite),
        "barrier_wait": barrier(lite),
        "checkpoint": checkpoint(lite, directory),
        "sampler": lite.active.hook.strategy_distributed_sampler_kwargs(),
    }
    (directory / f"rank-{lite.global_rank}.json").write_text(json.dumps(report, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    core.Lite(accelerator="cpu", strategy=args.strategy, devices=2).launch(run, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
