"""Prints the wall-clock time of the first optimizer step on global rank 0 (bench/first_step.py).

``python -m bench.first_step_worker raw`` under torchrun, or ``python -m bench.first_step_worker lite``
(whose ``ddp`` strategy starts the second process itself).
"""

from __future__ import annotations

import json
import sys
import time

import torch

# Imported before any process group exists: see bench/overhead_worker.py.
import torch.distributed.nn.functional


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, backward: object) -> None:
    loss = model(torch.randn(8, 64)).square().mean()
    backward(loss)  # type: ignore[operator]
    optimizer.step()


def raw() -> None:
    torch.distributed.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _step(model, optimizer, lambda loss: loss.backward())
    if torch.distributed.get_rank() == 0:
        print(json.dumps({"first_step_at": time.time()}), flush=True)
    torch.distributed.barrier()
    del model, optimizer
    torch.distributed.destroy_process_group()


def lite() -> None:
    from core import Lite

    def run(lite: Lite) -> None:
        module = torch.nn.Linear(64, 10)
        model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
        _step(model, optimizer, lite.backward)
        if lite.is_global_zero:
            print(json.dumps({"first_step_at": time.time()}), flush=True)

    Lite(accelerator="cpu", strategy="ddp", devices=2).launch(run)


if __name__ == "__main__":
    {"raw": raw, "lite": lite}[sys.argv[1]]()
