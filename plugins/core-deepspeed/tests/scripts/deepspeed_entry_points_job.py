"""Several Trainer entry points in one script under DeepSpeed (2 ranks): fit, validate, test, fit again, test again.

    python deepspeed_entry_points_job.py STRATEGY OUT

Rank 0 writes OUT/results.pt: the whole weights gathered as each fit starts and ends (inside the run, from the
partitions under stage 3), the module's own state dict after each entry point returned, and the metrics each
evaluation returned; under ZeRO-3 also what setting up a module created partitioned in an earlier run says.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback

BATCH_SIZE = 8


def data(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,), generator=generator))


def evaluation_sets() -> dict[str, TensorDataset]:
    """32 samples each: 16 per rank, 2 full batches, so that the logged mean is the mean over every sample."""
    return {"val": data(32, 1), "test": data(32, 2)}


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self(inputs), targets)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self(inputs), targets), sync_dist=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("test_loss", F.cross_entropy(self(inputs), targets), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.02)


def whole(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights, gathered from the partitions under ZeRO-3 (a collective: inside a run, on every rank)."""
    import deepspeed

    parameters = list(module.parameters())
    with deepspeed.zero.GatheredParameters(parameters, enabled=hasattr(parameters[0], "ds_id")):
        return {name: value.detach().clone() for name, value in module.named_parameters()}


class GatherWeights(Callback):
    """The whole weights as each fit starts and ends, gathered while its run is alive."""

    def __init__(self) -> None:
        self.started: list[dict[str, torch.Tensor]] = []
        self.fitted: list[dict[str, torch.Tensor]] = []

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        self.started.append(whole(module))

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self.fitted.append(whole(module))


def differences(module: torch.nn.Module) -> list[str]:
    """How ``module`` differs in structure from a freshly built Net: classes, attributes, hooks, parameters."""
    found = []
    for (name, mine), (_, fresh) in zip(module.named_modules(), Net().named_modules(), strict=True):
        if type(mine) is not type(fresh):
            found.append(f"{name}: class {type(mine).__name__}")
        if set(vars(mine)) != set(vars(fresh)):
            found.append(f"{name}: attributes {sorted(set(vars(mine)) ^ set(vars(fresh)))}")
        hooks = [key for key, value in vars(mine).items() if "hooks" in key and isinstance(value, dict) and value]
        if hooks:
            found.append(f"{name}: hooks in {hooks}")
        for parameter_name, parameter in mine.named_parameters(recurse=False):
            if type(parameter) is not torch.nn.Parameter or vars(parameter):
                found.append(f"{name}.{parameter_name}: {type(parameter).__name__} {sorted(vars(parameter))}")
    return found


def plain(module: torch.nn.Module) -> dict[str, Any]:
    """The module's parameters as they are outside a run, and how it differs from a plain Net."""
    return {"differences": differences(module),
            "state": {name: value.detach().clone() for name, value in module.named_parameters()}}


def set_up_in_a_later_run(strategy: str) -> str:
    """A module created partitioned (ZeRO-3's init_module(empty_init=True)) in one run, set up in the next one."""
    kept: dict[str, torch.nn.Module] = {}

    def create(lite: core.Lite) -> None:
        with lite.init_module(empty_init=True):
            kept["module"] = Net()
        lite.setup(kept["module"])

    def set_up_again(lite: core.Lite) -> str:
        try:
            lite.setup(kept["module"])
        except core.ConfigurationError as error:
            return str(error)
        return "set up without an error"

    core.Lite(accelerator="cpu", strategy=strategy, devices=2).launch(create)
    message = core.Lite(accelerator="cpu", strategy=strategy, devices=2).launch(set_up_again)
    return str(message)


def main(strategy: str, out: Path) -> None:
    core.seed_everything(3, verbose=False)
    module = Net()
    gather = GatherWeights()
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
                           callbacks=[gather])
    train = DataLoader(data(64, 0), batch_size=BATCH_SIZE, shuffle=True)
    sets = evaluation_sets()
    results: dict[str, Any] = {}
    trainer.fit(module, train)
    results["after_fit"] = plain(module)
    results["validate"] = trainer.validate(module, DataLoader(sets["val"], batch_size=BATCH_SIZE))
    results["after_validate"] = plain(module)
    results["test"] = trainer.test(module, DataLoader(sets["test"], batch_size=BATCH_SIZE))
    trainer.fit(module, train)
    results["after_second_fit"] = plain(module)
    results["second_test"] = trainer.test(module, DataLoader(sets["test"], batch_size=BATCH_SIZE))
    results["started"], results["fitted"] = gather.started, gather.fitted
    if strategy.startswith("deepspeed_stage_3"):
        results["later_run"] = set_up_in_a_later_run(strategy)
    if trainer.is_global_zero:
        torch.save(results, out / "results.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
