"""An optimizer whose ``step`` needs the closure (``torch.optim.LBFGS``) trains under the Trainer as under Lightning:
the forward and backward run inside the closure handed to ``optimizer.step``, which LBFGS calls several times a step.
Before, the Trainer stepped it without a closure and the fit failed with "step() missing ... 'closure'"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.trainer._loops import steps_with_a_closure


class LeastSquares(core.Module):
    def __init__(self, max_iter: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.max_iter = max_iter
        self.training_steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.training_steps += 1
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=self.max_iter)


def test_lbfgs_gets_a_closure_that_runs_the_training_step_each_time_it_evaluates(tmp_path: Path) -> None:
    torch.manual_seed(0)
    inputs = torch.randn(32, 3)
    targets = inputs @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.25
    model = LeastSquares(max_iter=5)
    loss_before = torch.nn.functional.mse_loss(model.layer(inputs), targets).item()
    trainer = core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, max_steps=2, logger=False,
                           enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(inputs, targets), batch_size=32))
    assert trainer.global_step == 2
    # LBFGS evaluated its closure more than once per step: each evaluation is one training_step.
    assert model.training_steps > 2
    loss_after = torch.nn.functional.mse_loss(model.layer(inputs), targets).item()
    assert loss_after < loss_before / 10


@pytest.mark.parametrize(("optimizer", "needs"), [
    (torch.optim.LBFGS([torch.nn.Parameter(torch.zeros(1))]), True),
    (torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1), False),
    (torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))]), False),
])
def test_which_optimizers_need_the_closure(optimizer: torch.optim.Optimizer, needs: bool) -> None:
    assert steps_with_a_closure(optimizer) is needs
