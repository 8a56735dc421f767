"""The precision kit's distributed job: ``python -m core.run --devices 2 -m core.testing._precision_job SPEC OUT``.

In the 2 processes ``core.run`` starts, for each strategy of the spec: a run in the precision under test sets up a
model with an optimizer made before setup, trains a few steps, records whether the optimizer holds the set-up
parameters and saves a checkpoint; a ``32-true`` run of the same strategy loads it and records what it holds. Each
rank writes ``OUT.<rank>.json``. Several runs in the same processes: the processes are what costs here.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

import core
from core.testing._worker import build_plugin
from core.toolkit.strategies import full_state_dict

STEPS = 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.Linear(128, 64),
                               torch.nn.Linear(64, 64))


def _train(lite: core.Lite, path: str) -> dict[str, Any]:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    module, optimizer = lite.setup(model, optimizer)
    generator = torch.Generator().manual_seed(lite.global_rank)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = module(lite.to_device(torch.randn(8, 64, generator=generator))).float().pow(2).mean()
        lite.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    held = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    present = {id(parameter) for parameter in module.parameters()}
    lite.save(path, {"model": module})
    return {
        "losses": losses,
        "unknown": len(held - present),
        "layer_types": sorted({type(layer).__name__ for layer in model.modules()}),
    }


def _load_plain(lite: core.Lite, path: str) -> dict[str, Any]:
    module = lite.setup(_model())
    lite.load(path, {"model": module})
    state = full_state_dict(module.module, rank_zero_only=False)
    return {"keys": sorted(state), "finite": all(bool(torch.isfinite(value.float()).all()) for value in state.values())}


def run(spec: dict[str, Any], out: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for strategy in spec["strategies"]:
        path = f"{out}.{strategy}.ckpt"
        try:
            settings = {"accelerator": spec["accelerator"], "strategy": strategy, "devices": spec["devices"]}
            trained = core.Lite(precision=build_plugin(spec["precision"]), **settings).launch(_train, path)
            loaded = core.Lite(precision="32-true", **settings).launch(_load_plain, path)
            results[strategy] = {"ok": True, "trained": trained, "loaded": loaded,
                                 "finite_losses": all(math.isfinite(loss) for loss in trained["losses"])}
        except Exception:  # reported to the test, which names the strategy
            results[strategy] = {"ok": False, "error": traceback.format_exc()}
    return results


if __name__ == "__main__":
    spec_path, out_path = sys.argv[1], sys.argv[2]
    record = run(json.loads(Path(spec_path).read_text()), out_path)
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else int(
        __import__("os").environ.get("RANK", "0"))
    Path(f"{out_path}.{rank}.json").write_text(json.dumps(record))
