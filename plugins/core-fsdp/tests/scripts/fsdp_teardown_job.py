"""What an fsdp run leaves behind in its 2 processes, and that they exit cleanly.

    python fsdp_teardown_job.py OUT

A first run (each Linear its own unit, parameters kept gathered after forward) trains a module that came in
whole and sets up one created empty; the script keeps both, the optimizer and the Lite module past the run (as a
user's script does, in module globals until exit). Then it checks that the run's process group was freed at
teardown and what the modules look like, and a second run sets them up again. Every rank writes OUT/report-<rank>.json.
"""

from __future__ import annotations

import json
import sys
import weakref
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

import core

KEPT: dict[str, Any] = {}  # what the script holds until interpreter exit


def architecture() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))


def whole_values(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().clone()
            for name, value in module.state_dict().items()}


def first_run(lite: core.Lite) -> dict[str, Any]:
    torch.manual_seed(0)
    whole = architecture()
    # A reference taken before set-up, as an optimizer made before it holds.
    KEPT["first_weight"] = cast(torch.nn.Linear, cast(torch.nn.Sequential, whole)[0]).weight
    with lite.init_module(empty_init=True):
        empty = architecture()
    model, optimizer = lite.setup(whole, torch.optim.Adam(whole.parameters(), lr=0.1))
    empty_model = lite.setup(empty)
    for _ in range(3):
        lite.backward(model(torch.randn(4, 4)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        empty_model(torch.randn(2, 4))
    KEPT.update(whole=whole, empty=empty, model=model, optimizer=optimizer)
    return {"group": weakref.ref(dist.group.WORLD), "trained": whole_values(model)}


def second_run(lite: core.Lite) -> dict[str, Any]:
    probe = torch.linspace(-1, 1, 8).reshape(2, 4)
    with torch.no_grad():
        expected = KEPT["whole"](probe)  # the plain module left by the first run
        model = lite.setup(KEPT["whole"])
        output = model(probe)
        empty_model = lite.setup(KEPT["empty"])
        materialised = not any(parameter.is_meta for parameter in KEPT["empty"].parameters())
        empty_model(probe)
    return {"same_output": torch.equal(output, expected), "empty_materialised": materialised}


def main(out: Path) -> None:
    from core_fsdp import FSDPStrategy

    # Each Linear its own unit (FSDP changes their class and hooks too); parameters left gathered after forward.
    strategy = FSDPStrategy(auto_wrap_policy={torch.nn.Linear}, reshard_after_forward=False)
    lite = core.Lite(accelerator="cpu", strategy=strategy, devices=2)
    first = lite.launch(first_run)
    assert first is not None
    whole, empty = KEPT["whole"], KEPT["empty"]
    plain = all(type(parameter) is torch.nn.Parameter for parameter in whole.parameters())
    report: dict[str, Any] = {
        "group_freed": first["group"]() is None,
        "whole_is_plain": plain,
        "whole_is_trained": plain and all(torch.equal(value, first["trained"][name])
                                          for name, value in whole.state_dict().items()),
        "original_parameter_kept": whole[0].weight is KEPT["first_weight"],
        "classes": sorted({type(module).__name__ for module in [*whole.modules(), *empty.modules()]}),
        "empty_on_meta": all(tensor.is_meta for tensor in [*empty.parameters(), *empty.buffers()]),
    }
    path = out / f"report-{lite.global_rank}.json"
    path.write_text(json.dumps(report))  # what the first run left, should the second one fail
    second = core.Lite(accelerator="cpu", strategy="fsdp", devices=2).launch(second_run)
    assert second is not None
    path.write_text(json.dumps({**report, **second}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
