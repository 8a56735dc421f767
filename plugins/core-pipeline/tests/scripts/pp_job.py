"""The small transformer under ``pipeline`` on 2 ranks.

    python pp_job.py MODE OUT [CHECKPOINT]

MODE: ``GPipe`` | ``1F1B`` (2 stages, split at ``layers.2``) | ``Interleaved1F1B`` (4 stages, 2 per rank) |
``stage-fn`` (1F1B, 2 stages cut by a function) | ``dp2`` (one stage, 2 data-parallel copies) |
``resume-<schedule>`` (load CHECKPOINT, written after HALF steps by any strategy, and train the remaining steps).

Every rank records OUT/<MODE>-report-<rank>.json: each step's loss as model(...) returned it on this rank, the
global loss (the mean over data-parallel copies), the state-dict keys and parameter count of its stages, what an
evaluation pass returned. The training modes save a checkpoint after HALF steps to OUT/<MODE>-checkpoint.pt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nd_transformer as nd
import torch
from core_pipeline import PipelineStrategy, view
from torch.utils.data import DataLoader, Subset

import core

HALF = nd.STEPS // 2


def two_stages(model: torch.nn.Module, index: int, count: int) -> torch.nn.Module:
    """The same cut as split_points=['layers.2'], written as a stage function."""
    first = ["embed", "layers.0", "layers.1"]
    rest = ["layers.2", "layers.3", "norm", "head"]
    return view(model, first if index == 0 else rest)


def strategy(mode: str) -> PipelineStrategy:
    schedule = mode.removeprefix("resume-")
    if schedule == "stage-fn":
        return PipelineStrategy(stage_fn=two_stages, num_stages=2, schedule="1F1B", n_microbatches=4,
                                loss_fn=nd.loss_fn)
    if schedule == "dp2":
        return PipelineStrategy(split_points=[], schedule="GPipe", n_microbatches=2, loss_fn=nd.loss_fn)
    if schedule == "Interleaved1F1B":
        return PipelineStrategy(split_points=["layers.1", "layers.2", "layers.3"], schedule=schedule,
                                n_microbatches=4, loss_fn=nd.loss_fn)
    return PipelineStrategy(split_points=["layers.2"], schedule=schedule, n_microbatches=4, loss_fn=nd.loss_fn)


def run(lite: core.Lite, mode: str, out: Path, checkpoint: Path | None) -> None:
    network = nd.model()
    model, optimizer = lite.setup(network, nd.optimizer(network.parameters()))
    mesh = lite.device_mesh
    assert mesh is not None
    report: dict[str, Any] = {"losses": [], "global_losses": [], "keys": sorted(model.state_dict()),
                              "elements": sum(parameter.numel() for parameter in model.parameters()),
                              "mesh": {"names": list(mesh.mesh_dim_names or ()), "shape": list(mesh.shape),
                                       "ranks": mesh.mesh.tolist()}}
    first = 0
    if checkpoint is not None:
        first = lite.load(checkpoint, {"model": model, "optimizer": optimizer})["step"]
        report["loaded_step"] = first
    replicas = lite.active.hook.strategy_distributed_sampler_kwargs()["num_replicas"]
    data = Subset(nd.dataset(), range(first * nd.GLOBAL_BATCH, nd.STEPS * nd.GLOBAL_BATCH))
    loader = lite.setup_dataloaders(DataLoader(data, batch_size=nd.GLOBAL_BATCH // replicas))
    for step, (tokens, targets) in enumerate(loader, start=first):
        optimizer.zero_grad()
        loss = model(tokens, target=targets)  # the schedule: forward and backward of every micro-batch
        lite.backward(loss)  # nothing left to do
        optimizer.step()
        report["losses"].append(float(loss))
        report["global_losses"].append(float(lite.all_reduce(loss, reduce_op="mean")))
        if step + 1 == HALF and checkpoint is None:
            lite.save(out / f"{mode}-checkpoint.pt", {"model": model, "optimizer": optimizer, "step": HALF})
    model.eval()
    tokens, targets = nd.dataset(1).tensors
    tokens, targets = tokens[: nd.GLOBAL_BATCH // replicas], targets[: nd.GLOBAL_BATCH // replicas]
    with torch.no_grad():
        logits = model(tokens)
        report["eval_loss"] = float(model(tokens, target=targets))
    report["eval_logits_loss"] = float(nd.loss_fn(logits, targets))
    (out / f"{mode}-report-{lite.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    checkpoint = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    plugins = ["distributed"] if checkpoint is not None and checkpoint.is_dir() else None
    core.Lite(accelerator="cpu", strategy=strategy(mode), devices=2, plugins=plugins).launch(run, mode, out, checkpoint)
