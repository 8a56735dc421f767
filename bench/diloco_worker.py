"""One 2-process job training the benchmark's GPT under Lite ``ddp``, with or without the diloco extension.

    python -m bench.diloco_worker MODE LAYERS DIM CONTEXT STEPS

``MODE`` is ``ddp`` (plain Lite ``ddp``: gradients all-reduced over both processes every step), or ``diloco``,
``diloco_bf16``, ``diloco_streaming`` (the extension with 2 groups of 1 process, ``H = SYNC_EVERY``; bf16
pseudo-gradients; ``SYNC_EVERY`` fragments, one per step, overlapped). The model, data and AdamW are
bench/gpt_worker.py's. Global rank 0 prints one JSON line ``{"mode": ..., "tokens_per_s": ..., "bytes_per_step":
..., "parameters": ...}``: ``bytes_per_step`` is what one rank passed to the collectives between groups per timed
step, counted by the extension for DiLoCo; for ``ddp`` every collective crosses groups, and its bytes are counted by
a communication hook registered for 2 untimed steps after the timed ones (so the timed steps run DDP's own path).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from bench.gpt_worker import GLOBAL_BATCH, GPT, WARMUP, _loss, batches

SYNC_EVERY = 5
MODES = {
    "ddp": None,
    "diloco": {"sync_every": SYNC_EVERY},
    "diloco_bf16": {"sync_every": SYNC_EVERY, "compression": "bf16"},
    "diloco_streaming": {"sync_every": SYNC_EVERY, "fragments": SYNC_EVERY},
}


def _counting_hook(counter: list[int]) -> Any:
    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP reads the real annotations; postponed ones fail
        counter[0] += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(state, bucket)

    return hook


def train(lite: Any, mode: str, layers: int, dim: int, context: int, steps: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(layers, dim, context)
    parameters = sum(p.numel() for p in model.parameters())
    module, optimizer = lite.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        lite.backward(_loss(module(tokens), targets))
        optimizer.step()

    data = batches(steps, context, lite.global_rank, lite.world_size)
    for tokens, targets in data[:WARMUP]:
        step(tokens, targets)
    extension = lite.active.extensions.get("diloco")
    sent_before = extension.traffic.bytes if extension is not None else 0
    dist.barrier()
    start = time.perf_counter()
    for tokens, targets in data[WARMUP:]:
        step(tokens, targets)
    seconds = time.perf_counter() - start
    if extension is not None:
        bytes_per_step = (extension.traffic.bytes - sent_before) / steps
    else:
        wrapped = next(sub for sub in module.modules() if isinstance(sub, DistributedDataParallel))
        counter = [0]
        wrapped.register_comm_hook(None, _counting_hook(counter))
        for tokens, targets in data[:2]:
            step(tokens, targets)
        bytes_per_step = counter[0] / 2
    if lite.global_rank == 0:
        print(json.dumps({"mode": mode, "tokens_per_s": GLOBAL_BATCH * context * steps / seconds,
                          "bytes_per_step": bytes_per_step, "parameters": parameters}), flush=True)


def main(argv: list[str]) -> None:
    mode = argv[0]
    layers, dim, context, steps = (int(value) for value in argv[1:5])
    torch.set_num_threads(1)
    from core import Lite

    plugins: list[Any] = []
    options = MODES[mode]
    if options is not None:
        from core_diloco import DiLoCoExtension  # type: ignore[import-not-found,unused-ignore]

        plugins.append(DiLoCoExtension(replicas=2, **options))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    lite = Lite(accelerator="cpu", strategy="ddp", devices=2, plugins=plugins)
    lite.launch(train, mode, layers, dim, context, steps)


if __name__ == "__main__":
    main(sys.argv[1:])
