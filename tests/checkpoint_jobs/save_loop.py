"""Saves resumable checkpoints back to back until killed; on start, checks that it resumed the newest one.

    python save_loop.py DIRECTORY IO        IO: torch | async | distributed

Every step sets each parameter and momentum buffer to the step number, then saves (every_n_steps=1), so
nearly all the time is spent saving and a kill lands in a save. ``distributed`` runs fsdp on 2 ranks, each
writing its shards. Rank 0 prints ``RESTORED <step>`` once it verified the restored values, then ``READY``.
"""

from __future__ import annotations

import sys

import torch
from torch.distributed.tensor import DTensor

import core
from core.fault_tolerance import ResumableCheckpoints


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    parameters = list(model.parameters())
    return [local(p) for p in parameters] + [local(optimizer.state[p]["momentum_buffer"]) for p in parameters]


def run(lite: core.Lite, directory: str) -> None:
    model = torch.nn.Sequential(*(torch.nn.Linear(512, 512) for _ in range(4)))
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()  # creates the momentum buffers, which the checkpoints hold too
    state = {"model": model, "optimizer": optimizer}
    checkpoints = ResumableCheckpoints(lite, directory, every_n_steps=1, keep=2)
    step = checkpoints.restore(state)
    inner = optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer
    if step:
        wrong = [index for index, tensor in enumerate(tensors(model, inner)) if not bool((tensor == step).all())]
        if lite.all_reduce(len(wrong), reduce_op="sum").item():
            raise RuntimeError(f"restored step {step} but tensors {wrong} hold other values")
    lite.print(f"RESTORED {step}", flush=True)
    lite.print("READY", flush=True)
    while True:
        step += 1
        with torch.no_grad():
            for tensor in tensors(model, inner):
                tensor.fill_(step)
        checkpoints.maybe_save(state, step)


if __name__ == "__main__":
    directory, io = sys.argv[1], sys.argv[2]
    if io == "distributed":
        core.Lite(accelerator="cpu", strategy="fsdp", devices=2).launch(run, directory)
    else:
        from core.builtin.async_checkpoint_io import AsyncCheckpointIO
        from core.builtin.checkpoint_io import TorchCheckpointIO

        plugin = AsyncCheckpointIO() if io == "async" else TorchCheckpointIO()
        core.Lite(accelerator="cpu", devices=1, plugins=[plugin]).launch(run, directory)
