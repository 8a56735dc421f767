"""One replica group of a torchft_ddp job: train until told to stop, record every committed step.

    python torchft_train.py OUT [--same-start] [--hold-in-backward-at STEP]

The lighthouse, the replica group and the group count come from the environment (TORCHFT_LIGHTHOUSE,
REPLICA_GROUP_ID, NUM_REPLICA_GROUPS, CORE_TORCHFT_HOST). The group records its pid and, for every step,
(wall-clock time, manager step, participants) in OUT/group-G-PID.json, and trains until the manager's step
reaches the number in OUT/stop-at (written by the test), then writes its weights and optimizer state.

Every step draws one global batch and group ``g`` of ``n`` trains on its ``g``-th slice. Each group starts from
its own random weights (the first quorum must sync them) unless ``--same-start`` is given; then they all start
from the same ones (``init_sync=False``: no group heals at the first step) and the record also holds the weights
that one process reaches on the whole global batches for the same number of steps (plain torch, no torchft):
data parallelism over the groups must match it.

``--hold-in-backward-at STEP`` stops the group inside the backward pass of a step (before its gradients reach
the allreduce, while the other groups wait in it) and writes that step to OUT/holding-G, for the test to SIGKILL it
there. The step is STEP, or the first one after it that follows two steps committed by all NUM_REPLICA_GROUPS
groups: the lighthouse may form the first quorums without a group that starts slowly (its min_replicas is below the
group count so that the survivors of a kill go on), and a kill before every group has stepped together is not the
failure the test is about. Two, not one: each other group recorded the first of them before it sent its gradients
for the second, which this group received before it held, so the records show a step of all groups before the kill
by causality, not by timing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from core_torchft import TorchFTStrategy

from core import Lite

MOMENTUM = 0.9


PER_GROUP = 16


def model_from(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def global_batch(step: int, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(PER_GROUP * groups, 16, generator=torch.Generator().manual_seed(step))
    return features, torch.tanh(features[:, :4])


def batch(step: int, group: int, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    features, targets = global_batch(step, groups)
    share = slice(PER_GROUP * group, PER_GROUP * (group + 1))
    return features[share], targets[share]


def reference(steps: int, groups: int) -> dict[str, list[float]]:
    """The weights one process reaches on the whole global batches in ``steps`` steps."""
    model = model_from(100)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=MOMENTUM)
    for step in range(steps):
        features, targets = global_batch(step, groups)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(features), targets).backward()
        optimizer.step()
    return {name: value.flatten().tolist() for name, value in model.state_dict().items()}


def stop_at(out: Path) -> int | None:
    try:
        return int((out / "stop-at").read_text())
    except (OSError, ValueError):
        return None


def write(path: Path, data: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def hold_in_backward(
    model: torch.nn.Module, manager: Any, step: int, out: Path, group: int, steps_of_all: list[int]
) -> None:
    def hold(gradient: torch.Tensor) -> torch.Tensor:
        if manager.current_step() >= step and steps_of_all[0] >= 2:
            write(out / f"holding-{group}", manager.current_step())  # whole when the test sees it
            time.sleep(600)  # until the test kills this process
        return gradient

    # The first layer's weight gets its gradient last: DDP cannot have sent this step's bucket yet.
    next(model.parameters()).register_hook(hold)


def train(lite: Lite, out: Path, same_start: bool, hold_at: int | None) -> None:
    strategy = lite.strategy
    assert isinstance(strategy, TorchFTStrategy)
    group, groups = strategy.group(), strategy.groups()
    model = model_from(100 if same_start else 100 + group)
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=MOMENTUM))
    manager = strategy.manager
    steps_of_all = [0]  # steps committed by every group, for --hold-in-backward-at
    if hold_at is not None:
        hold_in_backward(model, manager, hold_at, out, group, steps_of_all)
    ready = time.time()  # set up, before the first quorum (and before healing, for a group that joins late)
    record = out / f"group-{group}-{os.getpid()}.json"
    timeline: list[tuple[float, int, int]] = []
    while True:
        target = stop_at(out)
        if target is not None and manager.current_step() >= target:
            break
        optimizer.zero_grad()  # starts this step's quorum
        features, targets = batch(manager.current_step(), group, groups)
        lite.backward(torch.nn.functional.mse_loss(module(features), targets))
        optimizer.step()  # commits only if every group of the quorum succeeded
        timeline.append((time.time(), manager.current_step(), manager.num_participants()))
        if timeline[-1][2] == groups:
            steps_of_all[0] += 1
        if len(timeline) % 5 == 0:
            write(record, {"pid": os.getpid(), "group": group, "timeline": timeline, "done": False})
    weights = {name: value.flatten().tolist() for name, value in model.state_dict().items()}
    momentum = [state["momentum_buffer"].flatten().tolist() for state in optimizer.state.values()]
    write(record, {"pid": os.getpid(), "group": group, "timeline": timeline, "done": True, "ready": ready,
                   "step": manager.current_step(), "weights": weights, "momentum": momentum,
                   "gloo_interface": os.environ.get("GLOO_SOCKET_IFNAME"),
                   "reference": reference(manager.current_step(), groups) if same_start else None})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--same-start", action="store_true")
    parser.add_argument("--hold-in-backward-at", type=int)
    options = parser.parse_args()
    strategy = TorchFTStrategy(timeout=5, quorum_timeout=60, connect_timeout=10, init_sync=not options.same_start)
    Lite(accelerator="cpu", strategy=strategy, devices=1).launch(
        train, options.out, options.same_start, options.hold_in_backward_at
    )
