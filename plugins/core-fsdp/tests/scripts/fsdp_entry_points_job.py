"""Several Trainer entry points in one script on fsdp (2 ranks): fit, validate, test, fit again, test again.

    python fsdp_entry_points_job.py OUT

Rank 0 writes OUT/results.pt: the whole weights gathered from the shards as each fit starts and ends (inside
the run), how the module is sharded after each entry point returned and its state then (gathered by
``full_state_dict``, outside the run), and the metrics each evaluation returned.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from core_fsdp import full_state_dict
from torch.distributed.tensor import DTensor
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
    """The whole weights, gathered from every rank's shards (a collective: inside a run, on every rank)."""
    return {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().clone()
            for name, value in module.state_dict().items()}


class GatherWeights(Callback):
    """The whole weights as each fit starts and ends, gathered while its run is alive."""

    def __init__(self) -> None:
        self.started: list[dict[str, torch.Tensor]] = []
        self.fitted: list[dict[str, torch.Tensor]] = []

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        self.started.append(whole(module))

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self.fitted.append(whole(module))


def sharded(module: torch.nn.Module) -> dict[str, Any]:
    """The module's state as it is outside a run (gathered: a collective), and how much of it this rank holds."""
    parameters = list(module.parameters())
    return {
        "sharded": {
            "dtensors": all(isinstance(parameter, DTensor) for parameter in parameters),
            "local_elements": sum(parameter.to_local().numel() if isinstance(parameter, DTensor) else parameter.numel()
                                  for parameter in parameters),
            "elements": sum(parameter.numel() for parameter in parameters),
        },
        "state": full_state_dict(module),
    }


def main(out: Path) -> None:
    core.seed_everything(3, verbose=False)
    module = Net()
    gather = GatherWeights()
    trainer = core.Trainer(accelerator="cpu", strategy="fsdp", devices=2, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
                           callbacks=[gather])
    train = DataLoader(data(64, 0), batch_size=BATCH_SIZE, shuffle=True)
    sets = evaluation_sets()
    results: dict[str, Any] = {}
    trainer.fit(module, train)
    results["after_fit"] = sharded(module)
    results["validate"] = trainer.validate(module, DataLoader(sets["val"], batch_size=BATCH_SIZE))
    results["after_validate"] = sharded(module)
    results["test"] = trainer.test(module, DataLoader(sets["test"], batch_size=BATCH_SIZE))
    trainer.fit(module, train)
    results["after_second_fit"] = sharded(module)
    results["second_test"] = trainer.test(module, DataLoader(sets["test"], batch_size=BATCH_SIZE))
    results["started"], results["fitted"] = gather.started, gather.fitted
    if trainer.is_global_zero:
        torch.save(results, out / "results.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
