"""One job of the bitsandbytes tests: ``python adapters_job.py MODE OUT.json``, launched on 2 ddp processes.

A frozen quantized base (MODE: nf4, fp4, int8, ...) with LoRA-style adapters around its layers, the adapters trained
by ddp, each rank on its own half of the batch. Global rank 0 writes the record: the mean losses, how many parameters
train and their dtypes, the quantized layers' classes, the largest difference between the ranks' adapters after
training (ddp keeps them equal) and the size of the adapters' up matrices (zero at the start, so nonzero only once
they were updated).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

import core


class Adapter(torch.nn.Module):
    """A LoRA-style update beside a frozen layer: base(x) + up(down(x))."""

    def __init__(self, base: torch.nn.Module, features_in: int, features_out: int, rank: int = 8) -> None:
        super().__init__()
        self.base = base
        self.down = torch.nn.Parameter(torch.randn(rank, features_in) * 0.01)
        self.up = torch.nn.Parameter(torch.zeros(features_out, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.down.to(x.dtype).t() @ self.up.to(x.dtype).t()


def train(lite: core.Lite) -> dict[str, Any]:
    torch.manual_seed(0)  # the same base weights and adapters on every rank
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    adapted = [Adapter(model[0], 256, 512), Adapter(model[2], 512, 256)]
    model[0], model[2] = adapted
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    module, optimizer = lite.setup(model, torch.optim.AdamW(trainable, lr=1e-2))
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 256, generator=generator)
    targets = torch.randn(64, 256, generator=generator) * 0.1
    share = slice(lite.global_rank * 32, (lite.global_rank + 1) * 32)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(features[share]).float(), targets[share])
        lite.backward(loss)
        optimizer.step()
        losses.append(float(lite.all_reduce(loss.detach(), reduce_op="mean")))
    adapters = torch.cat([parameter.detach().float().flatten() for parameter in trainable])
    gathered = lite.all_gather(adapters)
    layers = [type(layer.base).__name__ for layer in adapted]
    return {"rank": lite.global_rank, "losses": losses, "trainable": len(trainable), "layers": layers,
            "trainable_dtypes": sorted({str(parameter.dtype) for parameter in trainable}),
            "world_size": lite.world_size,
            "max_adapter_difference": float((gathered[0] - gathered[1]).abs().max()),
            "adapters_moved": sum(float(layer.up.detach().abs().sum()) for layer in adapted)}


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    record = core.Lite(accelerator="cpu", strategy="ddp", devices=2, precision=mode).launch(train)
    if record["rank"] == 0:
        out.write_text(json.dumps(record))
