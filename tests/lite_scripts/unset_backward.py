"""Two ranks, one Lite launch per strategy named on the command line: a loss computed by a module that was never
set up is refused by backward(); the set-up module's loss, alone or with a frozen module beside it, trains.

    python unset_backward.py OUTPUT_DIRECTORY ddp fsdp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import core


def check(lite: core.Lite, output: Path, strategy: str) -> None:
    torch.manual_seed(lite.global_rank)  # different data per rank, like a sampler's
    model = lite.setup_module(torch.nn.Linear(4, 2))
    optimizer = lite.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    stray = torch.nn.Linear(4, 2)  # never set up: its gradients would not be synchronised
    inputs = torch.randn(8, 4)
    report: dict[str, object] = {}
    try:
        lite.backward(stray(inputs).sum())
    except core.CoreError as error:
        report["refused"] = str(error)
    teacher = stray(inputs).detach()  # a frozen module beside the set-up one: allowed
    lite.backward((model(inputs) - teacher).pow(2).sum())
    optimizer.step()
    whole = [getattr(parameter, "full_tensor", parameter.detach)() for parameter in model.parameters()]  # fsdp: DTensor
    weights = lite.all_gather(torch.cat([tensor.detach().reshape(-1) for tensor in whole]))
    report["ranks_agree"] = bool(torch.equal(weights[0], weights[1]))
    (output / f"{strategy}-{lite.global_rank}.json").write_text(json.dumps(report))


def main() -> None:
    output = Path(sys.argv[1])
    for strategy in sys.argv[2:]:
        lite = core.Lite(accelerator="cpu", strategy=strategy, devices=2)
        lite.launch(check, output, strategy)


if __name__ == "__main__":
    main()
