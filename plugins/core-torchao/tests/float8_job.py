"""One job of the float8 tests: ``python float8_job.py STRATEGY[,STRATEGY...] DEVICES OUT.json [--compile]``.

In one launch it trains bench/gpu_gpt.py's GPT (a small shape) from the same weights on the same batches with
``bf16-mixed`` and with ``fp8`` (emulated), eager and, with ``--compile``, compiled, and records every loss; then saves
the fp8 run's checkpoint, loads it into a bf16 run and that one's back into an fp8 run, recording keys and dtypes.
Several strategies may share the launch (``fsdp,model_parallel``): processes that import torch are the slow part.
Global rank 0 writes the record, one entry per strategy.

What each strategy adds to that:

- ``fsdp``: ``fp8-all-gather`` (``Float8Precision("fp8", float8_all_gather=True)``, eager): its losses, what a
  sharded weight is wrapped in, the dtype FSDP all-gathers it in, whether the scales were precomputed after the
  optimizer step; and checkpoint round trips between it and bf16.
- ``model_parallel`` (``data_parallel_size=1``, tensor parallel over the DEVICES ranks, eager only): ``bf16-mixed``
  and ``fp8`` with torch's plain ``ColwiseParallel`` / ``RowwiseParallel`` plans applied to each block's MLP before
  ``lite.setup`` (as a Module's ``configure_model`` does under the Trainer: float8 converts the layers after the
  plans, and carries their hooks over); ``fp8-float8-plans`` with torchao's ``Float8ColwiseParallel`` /
  ``Float8RowwiseParallel`` plans and ``fully_shard`` in ``ModelParallelStrategy(parallelize_fn=...)``, which runs
  after the conversion; and ``refused``: the error of a model that was ``fully_shard``-ed before the conversion.
  Every rank sees the same batches (one data-parallel replica).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, cast

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
MODEL_PARALLEL = "model_parallel"


def precision(name: str) -> Any:
    if name == "bf16-mixed":
        return name
    # Every layer of the small model converted (the default size rule would leave them all), the tied head left.
    return Float8Precision("fp8", layer_filter=LinearFilter(min_weight_elements=0),
                           float8_all_gather=name == "fp8-all-gather")


def plain_plans(model: GPT, mesh: Any) -> None:
    """torch's tensor-parallel plans on each block's MLP (the fused qkv projection stays whole)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for block in model.layers:
        parallelize_module(block, mesh["tensor_parallel"], {"up": ColwiseParallel(), "down": RowwiseParallel()})


def float8_plans_and_fully_shard(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """The parallelize_fn of ``fp8-float8-plans``: torchao's float8 plans (the layers are Float8Linear by now)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel, Float8RowwiseParallel

    assert isinstance(module, GPT)
    for block in module.layers:
        plan = {"up": Float8ColwiseParallel(), "down": Float8RowwiseParallel()}
        parallelize_module(block, mesh["tensor_parallel"], plan)
        fully_shard(block, mesh=mesh["data_parallel"])
    fully_shard(module, mesh=mesh["data_parallel"])
    return module


def make_lite(strategy: str, devices: int, name: str) -> core.Lite:
    chosen: Any = strategy
    if strategy == MODEL_PARALLEL:
        parallelize = float8_plans_and_fully_shard if name == "fp8-float8-plans" else None
        strategy_class = importlib.import_module("core_model_parallel").ModelParallelStrategy
        chosen = strategy_class(parallelize_fn=parallelize, data_parallel_size=1, tensor_parallel_size=devices)
    return core.Lite(accelerator="cpu", strategy=chosen, devices=devices, precision=precision(name))


def model(lite: core.Lite, name: str) -> GPT:
    torch.manual_seed(0)
    network = GPT(SHAPE)
    if lite.device_mesh is not None and name != "fp8-float8-plans":
        plain_plans(network, lite.device_mesh)  # before setup: float8 converts the layers after the plans
    return network


def batches(lite: core.Lite) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Counting sequences from random starts: learnable in a few steps, so the losses fall and can be compared.
    replicas, rank = (1, 0) if lite.device_mesh is not None else (lite.world_size, lite.global_rank)
    generator = torch.Generator().manual_seed(1234)
    starts = torch.randint(0, SHAPE.vocab, (STEPS, SHAPE.batch * replicas, 1), generator=generator)
    data = (starts + torch.arange(SHAPE.context + 1)) % SHAPE.vocab
    per_rank = data[:, rank * SHAPE.batch:(rank + 1) * SHAPE.batch]
    return [(step[:, :-1], step[:, 1:]) for step in per_rank]


def float8_all_gather_facts(network: GPT) -> dict[str, Any]:
    """What a sharded float8 weight is wrapped in, what FSDP all-gathers of it, whether its scale is ready."""
    from torch.distributed.tensor import DTensor

    def local(weight: torch.Tensor) -> Any:
        # The sharded tensor itself: to_local() returns a view that does not carry the precomputed scale.
        return getattr(weight, "_local_tensor", weight)

    weight = cast(torch.nn.Linear, cast(Any, network.layers[0]).up).weight
    assert isinstance(weight, DTensor)
    gathered = local(weight).fsdp_pre_all_gather(weight.device_mesh)[0]
    scales = [getattr(local(cast(torch.Tensor, layer.weight)), "_precomputed_scale", None)
              for layer in network.modules() if type(layer).__name__ == "Float8Linear"]
    # The scale of the next all-gather, precomputed after the step: the whole weight's (all ranks' shards').
    whole = torch.finfo(torch.float8_e4m3fn).max / float(weight.full_tensor().abs().max())
    scale = getattr(local(weight), "_precomputed_scale", None)
    return {
        "wrapped_as": type(local(weight)).__name__,
        "all_gather_dtypes": [str(tensor.dtype) for tensor in gathered],
        "scales_precomputed": bool(scales) and all(scale is not None for scale in scales),
        "scale_of_the_whole_weight": scale is not None and abs(float(scale) / whole - 1) < 1e-6,
    }


def train(lite: core.Lite, name: str, compile: bool) -> dict[str, Any]:
    network = model(lite, name)
    before = {key: parameter for key, parameter in network.named_parameters()}
    optimizer = torch.optim.AdamW(network.parameters(), lr=3e-3)
    runnable: torch.nn.Module = torch.compile(network) if compile else network  # type: ignore[assignment]
    module, optimizer = lite.setup(runnable, optimizer)
    losses = []
    for tokens, targets in batches(lite):
        optimizer.zero_grad()
        loss = loss_of(module(lite.to_device(tokens)), lite.to_device(targets))
        lite.backward(loss)
        optimizer.step()
        losses.append(float(lite.all_reduce(loss.detach(), reduce_op="mean")))
    optimizer_holds = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    model_holds = {id(parameter) for parameter in module.parameters()}
    record = {
        "losses": losses,
        "optimizer_is_the_models": optimizer_holds == model_holds,
        "same_parameter_objects": sorted(key for key, p in network.named_parameters() if before.get(key) is p),
        "layer_types": sorted({type(layer).__name__ for layer in network.modules()}),
    }
    if name == "fp8-all-gather":
        record.update(float8_all_gather_facts(network))
    return record


def refused(lite: core.Lite) -> str:
    """The error of a model fully_shard-ed before the float8 conversion (``configure_model`` doing it all)."""
    from torch.distributed.fsdp import fully_shard

    network = model(lite, "fp8")
    assert lite.device_mesh is not None
    for block in network.layers:
        fully_shard(block, mesh=lite.device_mesh["data_parallel"])
    try:
        lite.setup(network)
    except core.ConfigurationError as error:
        return str(error)
    return "not refused"


def round_trip(lite: core.Lite, name: str, path: str) -> dict[str, Any]:
    module = lite.setup(model(lite, name))
    lite.load(path, {"model": module})
    state = full_state_dict(module.module, rank_zero_only=False)
    return {
        "keys": sorted(state),
        "dtypes": sorted({str(value.dtype) for value in state.values()}),
        "checksum": float(sum(value.double().sum() for value in state.values())),
    }


def saved(lite: core.Lite, name: str, path: str) -> dict[str, Any]:
    module = lite.setup(model(lite, name))
    lite.save(path, {"model": module})
    state = full_state_dict(module.module, rank_zero_only=False)
    return {"path": path, "checksum": float(sum(value.double().sum() for value in state.values()))}


def run_strategy(strategy: str, devices: int, compile: bool, directory: str) -> dict[str, Any]:
    record: dict[str, Any] = {}
    runs = [("bf16-mixed", False), ("fp8", False)]
    if strategy == MODEL_PARALLEL:
        runs.append(("fp8-float8-plans", False))
    elif compile:
        runs.append(("fp8", True))  # compiled: fp8 only, against the eager bf16 run (compiling costs most here)
    if strategy == "fsdp":
        runs.append(("fp8-all-gather", False))
    for name, compiled in runs:
        lite = make_lite(strategy, devices, name)
        record[f"{name}{'-compiled' if compiled else ''}"] = lite.launch(train, name, compiled)
    if strategy == MODEL_PARALLEL:
        record["refused"] = make_lite(strategy, devices, "fp8").launch(refused)
    savers = ["fp8", "bf16-mixed"] + (["fp8-all-gather"] if strategy == "fsdp" else [])
    checkpoints = {}
    for name in savers:
        path = os.path.join(directory, f"{strategy}-{name}.ckpt")
        checkpoints[name] = make_lite(strategy, devices, name).launch(saved, name, path)
    pairs = [("fp8", "bf16-mixed"), ("bf16-mixed", "fp8")]
    if strategy == "fsdp":
        pairs += [("fp8-all-gather", "bf16-mixed"), ("bf16-mixed", "fp8-all-gather")]
    for saver, loader in pairs:
        lite = make_lite(strategy, devices, loader)
        record[f"load {saver} into {loader}"] = lite.launch(round_trip, loader, checkpoints[saver]["path"])
    record["checkpoints"] = checkpoints
    return record


def run_all(strategies: list[str], devices: int, compile: bool, directory: str) -> dict[str, Any]:
    return {strategy: run_strategy(strategy, devices, compile, directory) for strategy in strategies}


if __name__ == "__main__":
    names, device_count, out = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
    result = run_all(names, device_count, "--compile" in sys.argv, str(Path(out).parent))
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out).write_text(json.dumps(result, indent=1))
