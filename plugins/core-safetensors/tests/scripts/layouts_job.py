"""One layout on 2 gloo ranks: load safetensors weights written by another layout, save its own, train, resume.

    python layouts_job.py MODE OUT SOURCE

MODE: ``ddp`` | ``fsdp`` | ``model_parallel`` (tensor parallel over both ranks). Every rank:

1. builds :class:`Net` from another seed, loads ``SOURCE/weights`` (written by another layout) through
   ``Lite.load``, then ``OUT/single/weights`` through ``load_weights`` (counting the bytes it read);
2. saves ``OUT/MODE/weights`` (the loaded reference weights, ``Lite.save``);
3. takes one Adam step, saves ``OUT/MODE/trained`` (weights, optimizer, step), scrambles every weight and moment,
   loads it back and records whether each came back bitwise; rank 0 writes the gathered trained state to
   ``OUT/MODE/expected.pt``;
4. (fsdp) writes the weights again with ``writers="rank0"`` to ``OUT/MODE/rank0``.

Each rank reports to ``OUT/MODE/report-<rank>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from core_safetensors import SafetensorsCheckpointIO, load_weights, save_weights
from torch import nn
from torch.distributed.tensor import DTensor

import core
from core.toolkit.tensors import apply_to_tensors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from safetensors_net import MAX_SHARD_SIZE, Net, reference


def whole(value: Any) -> Any:
    """Every tensor gathered (a collective for ``DTensor`` shards) and copied to the CPU."""
    return apply_to_tensors(value, lambda tensor: (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor)
                            .detach().cpu().clone())


def equal(left: dict[str, Any], right: dict[str, Any]) -> bool:
    return left.keys() == right.keys() and all(
        torch.equal(left[name], right[name]) if isinstance(right[name], torch.Tensor) else
        equal(left[name], right[name]) if isinstance(right[name], dict) else left[name] == right[name]
        for name in right)


def local_bytes(module: nn.Module) -> int:
    return sum((value.to_local() if isinstance(value, DTensor) else value).nbytes
               for value in module.state_dict().values())


def tensor_parallel(module: nn.Module, mesh: Any) -> nn.Module:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(module, mesh["tensor_parallel"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return module


def strategy(mode: str) -> object:
    if mode == "model_parallel":
        from core_model_parallel import ModelParallelStrategy

        return ModelParallelStrategy(parallelize_fn=tensor_parallel, data_parallel_size=1, tensor_parallel_size=2)
    return mode


def scramble(network: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    with torch.no_grad():
        for value in network.state_dict().values():
            value.fill_(-7)
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    value.fill_(-7)


def run(lite: core.Lite, mode: str, out: Path, source: Path) -> None:
    torch.manual_seed(1)
    network = Net()
    model, optimizer = lite.setup(network, torch.optim.Adam(network.parameters(), lr=0.01))
    expected = reference()
    report: dict[str, Any] = {"placements": {name: str(value.placements) for name, value in
                                             network.state_dict().items() if isinstance(value, DTensor)}}

    lite.load(source / "weights", {"model": model})
    report["lite_load_equal"] = equal(whole(network.state_dict()), expected)
    scramble(network, optimizer)
    report["bytes_read"] = load_weights(network, out / "single" / "weights")
    report["local_bytes"] = local_bytes(network)
    report["load_weights_equal"] = equal(whole(network.state_dict()), expected)

    lite.save(out / mode / "weights", {"model": model})
    if mode == "fsdp":
        save_weights(network, out / mode / "rank0", max_shard_size=MAX_SHARD_SIZE, writers="rank0")

    optimizer.zero_grad()
    lite.backward(model(torch.randn(4, 16, generator=torch.Generator().manual_seed(2))).square().mean())
    optimizer.step()
    lite.save(out / mode / "trained", {"model": model, "optimizer": optimizer, "step": 1})
    trained = {"model": whole(network.state_dict()), "optimizer": whole(optimizer.state_dict())}
    if lite.is_global_zero:
        torch.save(trained, out / mode / "expected.pt")
    scramble(network, optimizer)
    remainder = lite.load(out / mode / "trained", {"model": model, "optimizer": optimizer})
    report["resumed_model_equal"] = equal(whole(network.state_dict()), trained["model"])
    report["resumed_optimizer_equal"] = equal(whole(optimizer.state_dict()), trained["optimizer"])
    report["remainder"] = remainder
    (out / mode / f"report-{lite.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    mode, out, source = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    io = SafetensorsCheckpointIO(max_shard_size=MAX_SHARD_SIZE)
    core.Lite(accelerator="cpu", strategy=strategy(mode), devices=2, plugins=[io]).launch(run, mode, out, source)
