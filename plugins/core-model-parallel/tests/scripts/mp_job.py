"""The small transformer under ``model_parallel`` (or ``ddp``, for comparison) on 2 ranks.

    python mp_job.py MODE OUT [CHECKPOINT]

MODE: ``ddp`` | ``1x2`` | ``2x1`` (data_parallel x tensor_parallel) | ``2x1-full`` (2x1, full checkpoints) |
``resume-1x2`` / ``resume-2x1`` (load CHECKPOINT, written after HALF steps, and train the remaining steps) |
``2x1-no-fully-shard`` (a parallelize function without fully_shard: set-up must fail) | ``no-parallelize``
(one process, a plain module and no parallelize function: set-up must fail). ``1x1`` modes run one process.

Every rank records OUT/<MODE>-report-<rank>.json: the global loss of each step (the mean over the data-parallel
replicas), what the mesh and the sampler looked like; and OUT/<MODE>-after-<rank>.json, after ``launch`` returned:
whether its module is still parallelized, how many elements it holds, and the tensor bytes the teardown and
``full_state_dict`` allocated (counted by core.testing.memory). Rank 0 writes the trained weights, gathered after
the run by ``full_state_dict``, to OUT/<MODE>-weights.pt. The training modes save a checkpoint after HALF
steps to OUT/<MODE>-checkpoint (sharded directory, or one file for ``2x1-full``) and go on to STEPS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nd_transformer as nd
import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, Subset

import core
from core import hookimpl
from core.testing.memory import AllocatedTensors, local_bytes

HALF = nd.STEPS // 2


def strategy(mode: str) -> object:
    if mode == "ddp":
        return "ddp"
    from core_model_parallel import ModelParallelStrategy

    if mode == "no-parallelize":
        return ModelParallelStrategy()
    shape = mode.removeprefix("resume-").split("-")[0]
    data_parallel, tensor_parallel = (int(size) for size in shape.split("x"))
    # -no-fully-shard: a parallelize function that forgets fully_shard (refused: nothing averages the replicas)
    parallelize = nd.parallelize_tensors_only if mode.endswith("-no-fully-shard") else nd.parallelize

    class Measured(ModelParallelStrategy):
        """model_parallel, counting the tensor bytes its teardown allocates on this rank."""

        teardown_memory: AllocatedTensors | None = None

        @hookimpl
        def strategy_teardown(self) -> None:
            with AllocatedTensors() as allocated:
                super().strategy_teardown()
            self.teardown_memory = allocated

    return Measured(
        data_parallel_size=data_parallel, tensor_parallel_size=tensor_parallel,
        save_distributed_checkpoint=not mode.endswith("-full"), parallelize_fn=parallelize,
    )


def whole(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().cpu().clone()
            for name, value in state.items()}


def devices(mode: str) -> int:
    if mode == "ddp":
        return 2
    if mode == "no-parallelize":
        return 1
    data_parallel, tensor_parallel = (int(size) for size in mode.removeprefix("resume-").split("-")[0].split("x"))
    return data_parallel * tensor_parallel


def run(lite: core.Lite, mode: str, out: Path, checkpoint: Path | None) -> torch.nn.Module:
    if mode == "no-parallelize":
        lite.setup(torch.nn.Linear(4, 4))
    network = nd.model()
    adam = nd.optimizer(network.parameters())
    model, optimizer = lite.setup(network, adam)
    report: dict[str, Any] = {"losses": []}
    first = 0
    if checkpoint is not None:
        remainder = lite.load(checkpoint, {"model": model, "optimizer": optimizer})
        first = remainder["step"]
        report["loaded_step"] = first
        report["loaded_weights"] = {name: value.tolist() for name, value in whole(model.state_dict()).items()}
    if mode != "ddp":
        mesh = lite.strategy.device_mesh  # type: ignore[attr-defined]
        report["mesh"] = {"names": list(mesh.mesh_dim_names or ()), "shape": list(mesh.shape)}
        report["local_elements"] = sum(parameter.to_local().numel() if isinstance(parameter, DTensor)
                                       else parameter.numel() for parameter in model.parameters())
    data = Subset(nd.dataset(), range(first * nd.GLOBAL_BATCH, nd.STEPS * nd.GLOBAL_BATCH))
    sampler_kwargs = lite.active.hook.strategy_distributed_sampler_kwargs()
    report["sampler"] = sampler_kwargs
    loader = lite.setup_dataloaders(DataLoader(data, batch_size=nd.GLOBAL_BATCH // sampler_kwargs["num_replicas"]))
    for step, (tokens, targets) in enumerate(loader, start=first):
        optimizer.zero_grad()
        loss = nd.loss_fn(model(tokens), targets)
        lite.backward(loss)
        optimizer.step()
        report["losses"].append(float(lite.all_reduce(loss.detach(), reduce_op="mean")))
        if step + 1 == HALF and checkpoint is None and mode != "ddp":
            suffix = ".pt" if mode.endswith("-full") else ""
            lite.save(out / f"{mode}-checkpoint{suffix}", {"model": model, "optimizer": optimizer, "step": HALF})
    (out / f"{mode}-report-{lite.global_rank}.json").write_text(json.dumps(report))
    return network


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    checkpoint = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    lite = core.Lite(accelerator="cpu", strategy=strategy(mode), devices=devices(mode))
    trained = lite.launch(run, mode, out, checkpoint)
    assert trained is not None  # ddp-style launch: every rank runs this script and gets its own result
    # After launch the run is torn down; the module stays parallelized and the process group with it.
    rank = lite.global_rank
    after: dict[str, Any] = {"parallelized": all(isinstance(tensor, DTensor) for tensor in trained.parameters())}
    if mode != "ddp":
        from core_model_parallel import full_state_dict

        after["local_elements"] = sum(parameter.to_local().numel() if isinstance(parameter, DTensor)
                                      else parameter.numel() for parameter in trained.parameters())
        after["local_bytes"] = local_bytes(trained)
        with AllocatedTensors() as consolidating:
            whole_state = full_state_dict(trained)
        teardown = lite.strategy.teardown_memory  # type: ignore[attr-defined]
        blocks = [parameter.numel() * parameter.element_size() for parameter in trained.parameters()]
        after["memory"] = {"largest_block": max(blocks), "whole": sum(blocks), "teardown_peak": teardown.peak_bytes,
                           "full_state_dict_peak": consolidating.peak_bytes}
    else:
        whole_state = {name: value.detach().clone() for name, value in trained.state_dict().items()}
    (out / f"{mode}-after-{rank}.json").write_text(json.dumps(after))
    if rank == 0:
        torch.save(whole_state, out / f"{mode}-weights.pt")
