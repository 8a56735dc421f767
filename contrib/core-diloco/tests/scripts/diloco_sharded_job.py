"""DiLoCo with a sharded strategy inside each group: 4 processes, 2 groups x 2; rank N writes OUT/rank-N.json.

    python diloco_sharded_job.py OUT LAYOUT      # LAYOUT: fsdp | fsdp-full | model_parallel

- ``fsdp``: ``FSDPStrategy`` shards each parameter over its group's 2 ranks; sharded checkpoints (``distributed``).
- ``fsdp-full``: the same with ``state_dict_type="full"`` (one gathered file written by rank 0): the checkpoint
  phase only.
- ``model_parallel``: ``ModelParallelStrategy`` with ``tensor_parallel_size=2``: each group holds one replica in
  column- and row-wise halves (its two ranks see the same batch); sharded checkpoints.

Phases:

- ``layout``: the parameters are ``DTensor`` s on the group's ranks only; the sampler's split.
- ``equivalence``: ``H = 1``, plain SGD at lr 1 as outer optimizer, SGD + momentum inside, against
  ``DistributedDataParallel`` over all 4 ranks built by hand on the same batches: the same parameters.
- ``traffic``: ``H = 4`` for 8 steps: the bytes this rank passed to the collectives between groups (its shard of
  each parameter, twice) against what ddp over all ranks all-reduces (the whole model, every step); the loss falls.
- ``checkpoint``: streaming (2 fragments, overlapped), ``H = 2``, AdamW; save after 3 steps (a fragment in
  flight), go on to 6; a fresh model and optimizer load the checkpoint and take steps 4 to 6 again: bitwise the
  same parameters, AdamW state, outer snapshot and outer momentum (this rank's shards).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.nn.functional as F
from core_diloco import DiLoCoExtension
from core_fsdp import FSDPStrategy
from core_model_parallel import ModelParallelStrategy
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import core
from core.toolkit.strategies import ParallelStrategy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diloco_job import ddp_reference, mlp  # the same MLP and hand-built DDP reference as the ddp job

WORLD, GROUPS = 4, 2


def tensor_parallel(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    return parallelize_module(module, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def whole(module: torch.nn.Module) -> torch.Tensor:
    """Every parameter whole, flattened (a collective within the group)."""
    return torch.cat([
        (parameter.full_tensor() if isinstance(parameter, DTensor) else parameter).detach().reshape(-1)
        for parameter in module.parameters()
    ])


def batch_seed(layout: str, rank: int) -> int:
    # Under tensor parallelism the two ranks of a group hold one replica: they take the same batch.
    return rank // 2 if layout == "model_parallel" else rank


def batches(layout: str, rank: int, steps: int, base: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(base + batch_seed(layout, rank))
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))  # a target the MLP can learn
    features = [torch.randn(8, 16, generator=generator) for _ in range(steps)]
    return [(batch, torch.tanh(batch @ teacher)) for batch in features]


def layout_phase(lite: core.Lite, extension: DiLoCoExtension, layout: str) -> dict[str, Any]:
    model = mlp()
    lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    meshes = sorted({tuple(parameter.device_mesh.mesh.flatten().tolist()) for parameter in model.parameters()
                     if isinstance(parameter, DTensor)})
    sampler = lite.active.hook.strategy_distributed_sampler_kwargs()
    strategy = lite.active.strategy
    assert isinstance(strategy, ParallelStrategy)
    world_mesh = strategy.world_mesh
    device_mesh = lite.device_mesh
    return {
        "mesh_names": list(world_mesh.mesh_dim_names or ()),
        "mesh_shape": list(world_mesh.shape),
        "mesh_ranks": world_mesh.mesh.tolist(),
        # The extension reads the strategy's mesh (one layout per run), not one of its own.
        "extension_reads_the_strategys_mesh": extension.dims is strategy.parallel_dims and extension.mesh is world_mesh,
        "device_mesh_names": list(device_mesh.mesh_dim_names or ()) if device_mesh is not None else None,
        "dtensor_parameters": sum(isinstance(parameter, DTensor) for parameter in model.parameters()),
        "parameters": len(list(model.parameters())),
        "parameter_meshes": [list(ranks) for ranks in meshes],
        "inner_ranks": dist.get_process_group_ranks(extension.inner_group),
        "replica_ranks": dist.get_process_group_ranks(extension.replica_group),
        "replica_index": extension.replica_index,
        "sampler": sampler,
    }


def equivalence(lite: core.Lite, extension: DiLoCoExtension, layout: str, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=1, fragments=1, outer_optimizer="sgd",
                                     outer_lr=1.0, outer_momentum=0.0)
    data = batches(layout, rank, 6, 100)
    model = mlp()
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    before = extension.traffic.bytes
    for features, targets in data:
        lite.backward(F.mse_loss(module(features), targets), model=module)
        optimizer.step()
        optimizer.zero_grad()
    sent = extension.traffic.bytes - before
    local_bytes = sum(local(parameter).numel() * 4 for parameter in model.parameters())

    reference = ddp_reference(data)
    trained, start = whole(model), whole(mlp())
    reference_flat = torch.cat([parameter.detach().reshape(-1) for parameter in reference.parameters()])
    return {
        "max_abs_difference": float((trained - reference_flat).abs().max()),
        "parameters_moved": float((trained - start).abs().max()),
        "diloco_bytes": sent, "steps": len(data), "local_parameter_bytes": local_bytes,
        "whole_parameter_bytes": trained.numel() * 4,
    }


def traffic(lite: core.Lite, extension: DiLoCoExtension, layout: str, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=4, fragments=1, outer_optimizer="nesterov",
                                     outer_lr=0.7, outer_momentum=0.9)
    data = batches(layout, rank, 8, 200)
    model = mlp()
    module, optimizer = lite.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    before = extension.traffic.bytes
    losses = []
    for features, targets in data * 3:
        loss = F.mse_loss(module(features), targets)
        lite.backward(loss, model=module)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return {
        "diloco_bytes": extension.traffic.bytes - before, "steps": len(losses), "losses": losses,
        "local_parameter_bytes": sum(local(parameter).numel() * 4 for parameter in model.parameters()),
        "whole_parameter_bytes": sum(parameter.numel() * 4 for parameter in model.parameters()),
    }


def state_of(model: torch.nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """This rank's part of every tensor of the run's state: parameters, the inner optimizer's state, the outer."""
    tensors = [local(parameter.detach()).clone() for parameter in model.parameters()]
    state = optimizer.state_dict()
    for entry in state["state"].values():
        tensors += [local(value).clone() for value in entry.values() if isinstance(value, torch.Tensor)]
    outer = state["diloco"]
    tensors += [local(tensor).clone() for tensor in outer["snapshot"]]
    for entry in outer["outer_optimizer"]["state"].values():
        tensors += [local(value).clone() for value in entry.values() if isinstance(value, torch.Tensor)]
    return tensors


def checkpoint(lite: core.Lite, extension: DiLoCoExtension, layout: str, out: str, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=2, fragments=2, compression="none",
                                     outer_optimizer="nesterov", outer_lr=0.7, outer_momentum=0.9)
    path = str(Path(out, "diloco.ckpt"))
    data = batches(layout, rank, 6, 300)

    def steps(module: Any, optimizer: Any, which: range) -> None:
        for step in which:
            features, targets = data[step]
            lite.backward(F.mse_loss(module(features), targets), model=module)
            optimizer.step()
            optimizer.zero_grad()

    model = mlp()
    module, optimizer = lite.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    steps(module, optimizer, range(3))
    in_flight_at_save = extension.syncs[-1].in_flight is not None
    lite.save(path, {"model": module, "optimizer": optimizer, "step": 3})
    groups_differ = whole(model).sum().item()
    steps(module, optimizer, range(3, 6))
    first = state_of(model, optimizer)

    torch.manual_seed(123)
    fresh = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    module, optimizer = lite.setup(fresh, torch.optim.AdamW(fresh.parameters(), lr=1e-2))
    remainder = lite.load(path, {"model": module, "optimizer": optimizer})
    resumed_steps = extension.syncs[-1].inner_steps
    steps(module, optimizer, range(3, 6))
    second = state_of(fresh, optimizer)
    return {
        "in_flight_at_save": in_flight_at_save,
        "sum_at_save": groups_differ,
        "remainder": {key: value for key, value in remainder.items() if isinstance(value, int)},
        "resumed_inner_steps": resumed_steps,
        "tensors": len(first),
        "bitwise": [bool(torch.equal(a, b)) for a, b in zip(first, second, strict=True)],
        "files": sorted(item.name for item in Path(path).iterdir()) if Path(path).is_dir() else [Path(path).name],
    }


def run(lite: core.Lite, out: str, layout: str) -> None:
    extension = lite.active.extensions["diloco"]
    assert isinstance(extension, DiLoCoExtension)
    rank = lite.global_rank
    report: dict[str, Any] = {"world_size": lite.world_size}
    if layout != "fsdp-full":
        report["layout"] = layout_phase(lite, extension, layout)
        report["equivalence"] = equivalence(lite, extension, layout, rank)
        report["traffic"] = traffic(lite, extension, layout, rank)
    report["checkpoint"] = checkpoint(lite, extension, layout, out, rank)
    Path(out, f"rank-{rank}.json").write_text(json.dumps(report))


def main() -> None:
    out, layout = sys.argv[1], sys.argv[2]
    strategy: Any
    if layout == "model_parallel":
        strategy = ModelParallelStrategy(parallelize_fn=tensor_parallel, data_parallel_size=1, tensor_parallel_size=2)
    else:
        strategy = FSDPStrategy(state_dict_type="full" if layout == "fsdp-full" else "sharded")
    lite = core.Lite(accelerator="cpu", strategy=strategy, devices=WORLD,
                     plugins=[DiLoCoExtension(replicas=GROUPS)])
    lite.launch(run, out, layout)


if __name__ == "__main__":
    main()
