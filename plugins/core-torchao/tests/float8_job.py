"""One job of the float8 tests: ``python float8_job.py STRATEGY DEVICES OUT.json [--compile]``.

In one launch it trains bench/gpu_gpt.py's GPT (a small shape) from the same weights on the same batches with
``bf16-mixed`` and with ``fp8`` (emulated), eager and, with ``--compile``, compiled, and records every loss; then saves
the fp8 run's checkpoint, loads it into a bf16 run and that one's back into an fp8 run, recording keys and dtypes.
Global rank 0 writes the record. Several checks per launch: processes that import torch are the slow part.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

REPOSITORY = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPOSITORY))

from core_torchao import Float8Precision  # noqa: E402

import core  # noqa: E402
from bench.gpu_gpt import GPT, Shape, loss_of  # noqa: E402
from core.toolkit.precisions import LinearFilter  # noqa: E402
from core.toolkit.strategies import full_state_dict  # noqa: E402

SHAPE = Shape(layers=2, dim=64, heads=4, context=32, vocab=256, batch=8)
STEPS = 12


def precision(name: str) -> Any:
    if name == "bf16-mixed":
        return name
    # Every layer of the small model converted (the default size rule would leave them all), the tied head left.
    return Float8Precision(name, layer_filter=LinearFilter(min_weight_elements=0))


def batches(rank: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Counting sequences from random starts: learnable in a few steps, so the losses fall and can be compared.
    generator = torch.Generator().manual_seed(1234)
    starts = torch.randint(0, SHAPE.vocab, (STEPS, SHAPE.batch * world_size, 1), generator=generator)
    data = (starts + torch.arange(SHAPE.context + 1)) % SHAPE.vocab
    per_rank = data[:, rank * SHAPE.batch:(rank + 1) * SHAPE.batch]
    return [(step[:, :-1], step[:, 1:]) for step in per_rank]


def train(lite: core.Lite, compile: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT(SHAPE)
    before = {name: parameter for name, parameter in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    runnable: torch.nn.Module = torch.compile(model) if compile else model  # type: ignore[assignment]
    module, optimizer = lite.setup(runnable, optimizer)
    losses = []
    for tokens, targets in batches(lite.global_rank, lite.world_size):
        optimizer.zero_grad()
        loss = loss_of(module(lite.to_device(tokens)), lite.to_device(targets))
        lite.backward(loss)
        optimizer.step()
        losses.append(float(lite.all_reduce(loss.detach(), reduce_op="mean")))
    optimizer_holds = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    model_holds = {id(parameter) for parameter in module.parameters()}
    return {
        "losses": losses,
        "optimizer_is_the_models": optimizer_holds == model_holds,
        "same_parameter_objects": sorted(name for name, p in model.named_parameters() if before.get(name) is p),
        "layer_types": sorted({type(layer).__name__ for layer in model.modules()}),
    }


def round_trip(lite: core.Lite, path: str) -> dict[str, Any]:
    torch.manual_seed(0)
    module = lite.setup(GPT(SHAPE))
    lite.load(path, {"model": module})
    state = full_state_dict(module.module, rank_zero_only=False)
    return {
        "keys": sorted(state),
        "dtypes": sorted({str(value.dtype) for value in state.values()}),
        "checksum": float(sum(value.double().sum() for value in state.values())),
    }


def saved(lite: core.Lite, directory: str, name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    module = lite.setup(GPT(SHAPE))
    path = os.path.join(directory, name)
    lite.save(path, {"model": module})
    state = full_state_dict(module.module, rank_zero_only=False)
    return {"path": path, "checksum": float(sum(value.double().sum() for value in state.values()))}


def run_all(strategy: str, devices: int, compile: bool, directory: str) -> dict[str, Any]:
    record: dict[str, Any] = {}
    runs = [("bf16-mixed", False), ("fp8", False)] + ([("fp8", True)] if compile else [])
    for name, compiled in runs:  # compiled: fp8 only, against the eager bf16 run (compiling costs most here)
        lite = core.Lite(accelerator="cpu", strategy=strategy, devices=devices, precision=precision(name))
        record[f"{name}{'-compiled' if compiled else ''}"] = lite.launch(train, compiled)
    checkpoints = {}
    for name in ("fp8", "bf16-mixed"):
        lite = core.Lite(accelerator="cpu", strategy=strategy, devices=devices, precision=precision(name))
        checkpoints[name] = lite.launch(saved, directory, f"{name}.ckpt")
    for saver, loader in (("fp8", "bf16-mixed"), ("bf16-mixed", "fp8")):
        lite = core.Lite(accelerator="cpu", strategy=strategy, devices=devices, precision=precision(loader))
        record[f"load {saver} into {loader}"] = lite.launch(round_trip, checkpoints[saver]["path"])
    record["checkpoints"] = checkpoints
    return record


if __name__ == "__main__":
    strategy_name, device_count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    result = run_all(strategy_name, device_count, "--compile" in sys.argv, str(Path(out).parent))
    Path(out).write_text(json.dumps(result, indent=1))
