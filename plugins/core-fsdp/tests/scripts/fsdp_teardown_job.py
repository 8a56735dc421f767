"""What an fsdp run leaves behind in its 2 processes: sharded modules that compute, and a clean exit.

    python fsdp_teardown_job.py OUT

A first run (each Linear its own unit, parameters kept gathered after forward) trains a module that came in
whole and sets up one created empty; the script keeps both, the optimizer and the Lite module past the run (as a
user's script does, in module globals until exit). The strategy counts the tensor memory its teardown allocates.
After the run the script checks that both modules are still sharded and compute, gathers one whole with
``full_state_dict`` (counting that too), and a second run takes them up again as they are. Every rank writes
OUT/report-<rank>.json; the process group lives until exit, which must be clean.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from core_fsdp import FSDPStrategy, full_state_dict
from torch.distributed.tensor import DTensor

import core
from core import hookimpl
from core.testing.memory import AllocatedTensors, local_bytes

KEPT: dict[str, Any] = {}  # what the script holds until interpreter exit
PROBE = torch.linspace(-1, 1, 8).reshape(2, 4)


def architecture() -> torch.nn.Module:
    # Every tensor has an even first dimension: each rank's shard is exactly half of it.
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))


class MeasuredFSDP(FSDPStrategy):
    """fsdp, counting the tensor bytes its teardown allocates on this rank."""

    teardown_memory: AllocatedTensors | None = None

    @hookimpl
    def strategy_teardown(self) -> None:
        with AllocatedTensors() as allocated:
            super().strategy_teardown()
        self.teardown_memory = allocated


def whole_values(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().clone()
            for name, value in module.state_dict().items()}


def first_run(lite: core.Lite) -> dict[str, Any]:
    torch.manual_seed(0)
    whole = architecture()
    with lite.init_module(empty_init=True):
        empty = architecture()
    model, optimizer = lite.setup(whole, torch.optim.Adam(whole.parameters(), lr=0.1))
    empty_model = lite.setup(empty)
    for _ in range(3):
        lite.backward(model(torch.randn(4, 4)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        empty_model(PROBE)
        output = model(PROBE)
    KEPT.update(whole=whole, empty=empty, model=model, optimizer=optimizer)
    return {"trained": whole_values(model), "output": output}


def sharded_in_halves(module: torch.nn.Module) -> bool:
    return all(isinstance(parameter, DTensor) and 2 * parameter.to_local().numel() == parameter.numel()
               for parameter in module.parameters())


def second_run(lite: core.Lite) -> dict[str, Any]:
    with torch.no_grad():
        output = lite.setup(KEPT["whole"])(PROBE)
        lite.setup(KEPT["empty"])(PROBE)
    return {"second_run_same_output": torch.equal(output, KEPT["output"])}


def main(out: Path) -> None:
    strategy = MeasuredFSDP(auto_wrap_policy={torch.nn.Linear}, reshard_after_forward=False)
    lite = core.Lite(accelerator="cpu", strategy=strategy, devices=2)
    first = lite.launch(first_run)
    assert first is not None and strategy.teardown_memory is not None
    whole, empty = KEPT["whole"], KEPT["empty"]
    KEPT["output"] = first["output"]
    whole_bytes = sum(tensor.numel() * tensor.element_size() for tensor in first["trained"].values())
    largest_block = max(tensor.numel() * tensor.element_size() for tensor in first["trained"].values())
    sharded = sharded_in_halves(whole) and sharded_in_halves(empty)
    local_after_teardown = local_bytes(whole)
    with AllocatedTensors() as consolidating:
        state = full_state_dict(whole)
    with torch.no_grad():
        output_after = whole(PROBE)  # outside any run: the kept group serves the forward's gathers
        empty(PROBE)
    report: dict[str, Any] = {
        "group_kept": dist.is_initialized(),
        "sharded_in_halves": sharded,
        "classes": sorted({type(module).__name__ for module in whole.modules()}),
        "same_output": torch.equal(output_after, first["output"]),
        "full_state_is_trained": (
            state.keys() == first["trained"].keys()
            and all(torch.equal(value, first["trained"][name]) for name, value in state.items())
        ) if lite.global_rank == 0 else state == {},
        "memory": {
            "whole": whole_bytes,
            "largest_block": largest_block,
            "local_after_teardown": local_after_teardown,
            "teardown_peak": strategy.teardown_memory.peak_bytes,
            "teardown_total": strategy.teardown_memory.total_bytes,
            "full_state_dict_peak": consolidating.peak_bytes,
        },
    }
    path = out / f"report-{lite.global_rank}.json"
    path.write_text(json.dumps(report))  # what the first run left, should the second one fail
    second = core.Lite(accelerator="cpu", strategy="fsdp", devices=2).launch(second_run)
    assert second is not None
    path.write_text(json.dumps({**report, **second}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
