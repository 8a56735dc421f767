"""A lone peer whose optimizer hivemind re-creates (offload_optimizer) with a scheduler from scheduler_fn.

``python lone.py OUT.json``: trains 3 hivemind epochs of 2 steps each and writes the learning rate per epoch.
"""

import functools
import json
import sys
from pathlib import Path

import torch
from core_hivemind import HivemindStrategy

from core import Lite


def main(lite: Lite, out: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    before = [tensor.detach().clone() for tensor in model.parameters()]
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    collaborative = optimizer.optimizer
    rates, steps = [], 0
    while collaborative.local_epoch < 3:
        lite.backward(model(torch.randn(8, 4)).pow(2).mean())
        optimizer.step()
        steps += 1
        rates.append([collaborative.local_epoch, collaborative.state_averager.scheduler.get_last_lr()[0]])
    moved = any(not torch.equal(old, new) for old, new in zip(before, model.parameters(), strict=True))
    out.write_text(json.dumps({"rates": rates, "steps": steps, "moved": moved}))


if __name__ == "__main__":
    strategy = HivemindStrategy(
        target_batch_size=16, batch_size=8, run_id="lone", matchmaking_time=0.5, offload_optimizer=True,
        reuse_grad_buffers=True,
        scheduler_fn=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5),
    )
    Lite(accelerator="cpu", strategy=strategy).launch(main, Path(sys.argv[1]))
