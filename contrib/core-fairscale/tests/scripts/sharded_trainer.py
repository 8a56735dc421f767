"""``Trainer(strategy="ddp_sharded", devices=2, precision="16-mixed")`` trains, agrees on skipping a step, saves.

    python sharded_trainer.py OUT

At step OVERFLOW_STEP the last rank makes the gradient of one parameter it owns infinite (in
``on_after_backward``, after the gradients were reduced to their owners): only that rank sees an overflow, and
the strategy must make every rank skip the step (an OSS step ends in broadcasts from every rank: ranks that
disagree would wait for each other until the timeout). Each rank writes OUT/trainer-rank-N.json: the steps at
which its parameters did not change, its final parameters and its loss scale; rank 0 saves OUT/trainer.ckpt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core

STEPS = 5
OVERFLOW_STEP = 2
RESUMED_STEPS = 2
BATCH = 8


class Regression(core.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.unchanged_steps: list[int] = []
        self.losses: list[float] = []
        self._before: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        self._before = [parameter.detach().clone() for parameter in self.parameters()]
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.losses.append(float(loss))
        return loss

    def on_after_backward(self) -> None:
        if self.trainer.global_step == OVERFLOW_STEP and self.trainer.global_rank == self.trainer.world_size - 1:
            owned = [parameter for parameter in self.parameters() if parameter.grad is not None]
            owned[0].grad.fill_(float("inf"))  # type: ignore[union-attr]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if all(torch.equal(before, after) for before, after in zip(self._before, self.parameters(), strict=True)):
            self.unchanged_steps.append(batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn((STEPS + RESUMED_STEPS) * BATCH * 2, 16, generator=generator)
    return DataLoader(TensorDataset(inputs, inputs[:, :2].sum(dim=1, keepdim=True)), batch_size=BATCH)


def trainer(devices: int, max_steps: int) -> core.Trainer:
    return core.Trainer(
        accelerator="cpu", strategy="ddp_sharded", devices=devices, precision="16-mixed", max_steps=max_steps,
        enable_checkpointing=False, logger=False, enable_progress_bar=False, enable_model_summary=False,
    )


def resume(out: Path) -> dict[str, Any]:
    """One process takes RESUMED_STEPS more steps from OUT/trainer.ckpt (called by sharded_resume.py)."""
    module = Regression()
    run = trainer(1, STEPS + RESUMED_STEPS)
    run.fit(module, loader(), ckpt_path=str(out / "trainer.ckpt"))
    return {"global_step": run.global_step, "losses": module.losses}


def main(out: Path) -> None:
    module = Regression()
    run = trainer(2, STEPS)
    run.fit(module, loader())
    run.save_checkpoint(out / "trainer.ckpt")
    checkpoint = torch.load(out / "trainer.ckpt", weights_only=True) if run.is_global_zero else {}
    report = {
        "global_step": run.global_step,
        "unchanged_steps": module.unchanged_steps,
        "parameters": [parameter.detach().flatten().tolist() for parameter in module.parameters()],
        "scale": float(checkpoint.get("core/precision", {}).get("scale", -1.0)),
        "optimizer_state_entries": len(checkpoint["optimizer_states"][0]["state"]) if checkpoint else -1,
    }
    (out / f"trainer-rank-{run.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
