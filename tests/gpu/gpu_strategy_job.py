"""One process, world size 1, every process-group strategy on the device (tests/gpu/test_gpu_strategies.py reads it).

    python tests/gpu/gpu_strategy_job.py OUT.json [cuda|cpu] [CASE ...]

Cases run one after another, each its own ``Lite.launch``: ``ddp``, ``fsdp``, ``model_parallel`` (a 1x1 mesh:
tensor-parallel plan and ``fully_shard``), ``fsdp_compiled`` (``torch.compile`` under fsdp) and ``dcp_roundtrip``
(fsdp with the ``distributed`` checkpoint_io: save, perturb, load). Each case writes what it observed (the process
group's backend and size, where the parameters live and their type, losses, a reduction's result) or its error into
one JSON object keyed by case, so that one failing case leaves the others' results. ``cpu`` runs the same cases over
gloo, which is how this script is checked on a machine without a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from core import Lite

CASES = ("ddp", "fsdp", "model_parallel", "fsdp_compiled", "dcp_roundtrip")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 4)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(inputs)))


def parallelize(module: nn.Module, device_mesh: Any) -> nn.Module:
    """Column- then row-wise tensor parallelism, then fully_shard over the data-parallel dimension."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(module, device_mesh["tensor_parallel"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def strategy_for(case: str) -> Any:
    if case.startswith(("fsdp", "dcp")):
        from core_fsdp import FSDPStrategy  # type: ignore[import-not-found,unused-ignore]

        return FSDPStrategy()
    if case == "model_parallel":
        from core_model_parallel import ModelParallelStrategy  # type: ignore[import-not-found,unused-ignore]

        return ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=1, tensor_parallel_size=1)
    return case


def _data(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(16, 32, generator=generator)
    targets = torch.randint(0, 4, (16,), generator=generator)
    return inputs.to(device), targets.to(device)


def train(lite: Lite, case: str) -> dict[str, Any]:
    """A few SGD steps on one batch; what the process group, the parameters and the losses looked like."""
    torch.manual_seed(0)
    model: nn.Module = Net()
    if case.endswith("compiled"):
        model = torch.compile(model)  # type: ignore[assignment]
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    inputs, targets = _data(lite.device)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        lite.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    parameters = list(model.parameters())
    reduced = lite.all_reduce(torch.ones(3, device=lite.device) * 2, reduce_op="sum")
    return {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "device": str(lite.device),
        "parameter_devices": sorted({str(p.device) for p in parameters}),
        "parameter_types": sorted({type(p.data).__name__ for p in parameters}),
        "module_type": type(getattr(model, "module", model)).__name__,
        "losses": losses,
        "reduced": [float(value) for value in reduced.cpu()],
        "reduced_device": str(reduced.device),
        "compiled_graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]),
    }


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    return full.detach().cpu().clone()


def dcp_roundtrip(lite: Lite, case: str) -> dict[str, Any]:
    """Save model and optimizer through ``distributed``, change the weights, load: the saved values come back."""
    torch.manual_seed(0)
    module = Net()
    model, optimizer = lite.setup(module, torch.optim.Adam(module.parameters(), lr=0.1))
    inputs, targets = _data(lite.device)
    for _ in range(2):
        optimizer.zero_grad()
        lite.backward(nn.functional.cross_entropy(model(inputs), targets))
        optimizer.step()
    saved = {name: _full(p) for name, p in model.named_parameters()}
    path = Path(tempfile.mkdtemp(prefix="core-gpu-dcp-")) / "checkpoint"
    lite.save(path, {"model": model, "optimizer": optimizer, "step": 2})
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    state: dict[str, Any] = {"model": model, "optimizer": optimizer}
    remainder = lite.load(path, state)
    restored = {name: _full(p) for name, p in model.named_parameters()}
    return {
        "checkpoint_io": lite.active.config.checkpoint_io,
        "files": sorted(entry.name for entry in path.iterdir()) if path.is_dir() else [path.name],
        "max_abs_difference": max(float((saved[name] - restored[name]).abs().max()) for name in saved),
        "parameter_devices": sorted({str(p.device) for p in model.parameters()}),
        "remainder": {key: value for key, value in (remainder or {}).items() if isinstance(value, int)},
    }


def run_case(case: str, accelerator: str) -> dict[str, Any]:
    plugins = ["distributed"] if case == "dcp_roundtrip" else None
    lite = Lite(accelerator=accelerator, strategy=strategy_for(case), devices=1, precision="32-true", plugins=plugins)
    body: Callable[[Lite, str], dict[str, Any]] = dcp_roundtrip if case == "dcp_roundtrip" else train
    return lite.launch(body, case)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    accelerator = argv[1] if len(argv) > 1 else "cuda"
    cases = argv[2:] or list(CASES)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    results: dict[str, Any] = {}
    for case in cases:
        try:
            results[case] = {"ok": True, **run_case(case, accelerator)}
        except Exception as error:  # reported per case: the other cases still run
            results[case] = {"ok": False, "error": f"{type(error).__name__}: {error}",
                             "traceback": traceback.format_exc()[-3000:]}
        out.write_text(json.dumps(results, indent=2))
        print(f"{case}: {'ok' if results[case]['ok'] else results[case]['error']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
