"""One 2-rank job: the bench GPT (bench/gpt_worker.py) under one memory configuration, two Adam steps.

    python -m bench.activations_worker CONFIG LAYERS DIM CONTEXT OUT

``CONFIG`` is ``ddp``, ``fsdp`` (each Block its own unit), ``fsdp_ac`` (and every Block checkpointed:
``activation_checkpointing_policy={Block}``) or ``fsdp_ac_offload`` (and ``cpu_offload=True``). Global rank 0 writes
``OUT/report-<CONFIG>.json`` with, per rank: ``saved_bytes``, the peak bytes autograd saved for backward in a
step (counted with ``core.toolkit.strategies.saved_tensor_bytes``: a checkpointed Block keeps nothing but its input;
a ``DTensor`` counts its local part), and ``peak_mb``, ``ru_maxrss`` (runtime included).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from bench.gpt_worker import GLOBAL_BATCH, GPT, Block, _loss, batches
from core import Lite
from core.toolkit.strategies import saved_tensor_bytes


def strategy_of(config: str) -> Any:
    if config == "ddp":
        return "ddp"
    from core_fsdp import FSDPStrategy  # type: ignore[import-not-found,unused-ignore]

    policy = {Block} if config in ("fsdp_ac", "fsdp_ac_offload") else None
    return FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy=policy,
                        cpu_offload=config == "fsdp_ac_offload")


def _step(lite: Lite, model: Any, optimizer: Any, tokens: torch.Tensor, targets: torch.Tensor) -> int:
    with saved_tensor_bytes() as saved:
        loss = _loss(model(tokens), targets)
    lite.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return saved[0]


def main(lite: Lite, config: str, layers: int, dim: int, context: int, out: Path) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(layers, dim, context)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, optimizer = lite.setup(model, optimizer)
    data = batches(2, context, lite.global_rank, lite.world_size)
    saved = max(_step(lite, model, optimizer, tokens, targets) for tokens, targets in data[:2])
    figures = [float(saved), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]
    gc.collect()  # see bench/memory_worker.py: an fsdp model's group must not be freed at interpreter exit
    gathered = lite.all_gather(torch.tensor(figures, dtype=torch.float64))
    if lite.is_global_zero:
        ranks = [{"saved_bytes": row[0], "peak_mb": row[1]} for row in gathered.tolist()]
        report = {"ranks": ranks, "batch_per_rank": GLOBAL_BATCH // lite.world_size, "context": context}
        (out / f"report-{config}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    config, layers, dim, context, out = sys.argv[1], *map(int, sys.argv[2:5]), Path(sys.argv[5])
    Lite(accelerator="cpu", strategy=strategy_of(config), devices=2).launch(main, config, layers, dim, context, out)
