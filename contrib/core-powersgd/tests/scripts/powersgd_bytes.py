"""Bytes passed to all-reduce per training step on 2 ranks, plain and compressed; rank N writes OUT/rank-N.json.

    python powersgd_bytes.py OUT

The Lite run uses ``plugins=[PowerSGDExtension(...)]`` with ``strategy="ddp"``: the path a user takes. Three
more copies of the model are wrapped here by hand in ``DistributedDataParallel`` over the same process group,
to measure on the same data the plain all-reduce (torch's ``allreduce_hook``, what DDP does without a hook),
fp16 alone and PowerSGD with fp16. Every ``torch.distributed.all_reduce`` call is counted by a wrapper
installed around the function the communication hooks call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from core_powersgd import PowerSGDExtension
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import core

STEPS = 6
WARMUP = 2
RANK = 1


class AllReduceBytes:
    """Wraps ``torch.distributed.all_reduce`` and adds up the bytes of the tensors passed to it."""

    def __init__(self) -> None:
        self.bytes = 0
        self.original = dist.all_reduce

        def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.bytes += tensor.numel() * tensor.element_size()
            return self.original(tensor, *args, **kwargs)

        dist.all_reduce = counting  # the hooks look it up on the module at every call

    def take(self) -> int:
        counted, self.bytes = self.bytes, 0
        return counted


def big_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 8),
    )


def batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(16, 1024, generator=generator), torch.randn(16, 8, generator=generator)) for _ in range(STEPS)]


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, data: list[Any], backward: Any,
          counter: AllReduceBytes) -> tuple[list[int], list[float]]:
    per_step, losses = [], []
    counter.take()
    for features, targets in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(features), targets)
        backward(loss)
        optimizer.step()
        per_step.append(counter.take())
        losses.append(float(loss.detach()))
    return per_step, losses


def by_hand(hook_state: Any, hook: Any, counter: AllReduceBytes, data: list[Any]) -> list[int]:
    model = DistributedDataParallel(big_model())
    if hook is not None:
        model.register_comm_hook(hook_state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return train(model, optimizer, data, lambda loss: loss.backward(), counter)[0]


def run(lite: core.Lite, out: str) -> None:
    extension = lite.active.extensions["powersgd"]
    assert isinstance(extension, PowerSGDExtension)
    counter = AllReduceBytes()
    data = batches(lite.global_rank)
    model = lite.setup(big_model())
    optimizer = lite.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.01))
    powersgd, losses = train(model, optimizer, data, lite.backward, counter)
    report = {
        "world_size": lite.world_size,
        "plain": by_hand(None, default_hooks.allreduce_hook, counter, data),
        "powersgd": powersgd,
        "powersgd_losses": losses,
        "fp16": by_hand(*PowerSGDExtension(fp16=True, powersgd=False).communication_hook(), counter, data),
        "powersgd_fp16": by_hand(
            *PowerSGDExtension(rank=RANK, warmup=WARMUP, fp16=True).communication_hook(), counter, data
        ),
        "states": [type(state).__name__ for state in extension.states],
        "iterations": [getattr(state, "iter", None) for state in extension.states],
    }
    dist.all_reduce = counter.original
    Path(out, f"rank-{lite.global_rank}.json").write_text(json.dumps(report))


def main() -> None:
    lite = core.Lite(accelerator="cpu", strategy="ddp", devices=2,
                     plugins=[PowerSGDExtension(rank=RANK, warmup=WARMUP)])
    lite.launch(run, sys.argv[1])


if __name__ == "__main__":
    main()
