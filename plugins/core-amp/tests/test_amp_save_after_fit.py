"""``trainer.save_checkpoint`` after ``fit`` under ``16-mixed`` writes the fit's loss scale, not a fresh scaler's.

The checkpoint is written through a short run whose precision plugin is new; without carrying the fit's state over,
a scale the fit had backed off read 65536 (found under ``ddp_sharded``). One CPU process: torch's GradScaler runs on
the CPU too.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.toolkit.checkpoint import PRECISION_KEY


class InfOnce(core.Module):
    """A loss that is infinite at the first step: the scaler skips it and halves its scale."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.calls = 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.calls += 1
        loss = self.layer(batch[0]).float().square().mean()
        return loss * float("inf") if self.calls == 1 else loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_save_checkpoint_after_fit_holds_the_fits_backed_off_scale(tmp_path: Path) -> None:
    trainer = core.Trainer(accelerator="cpu", devices=1, precision="16-mixed", max_steps=3, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    trainer.fit(InfOnce(), train_dataloaders=DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4))
    fitted = trainer.lite.active.precision.scaler.get_scale()
    assert fitted < 2.0**16  # the skipped step halved the initial scale
    trainer.save_checkpoint(tmp_path / "final.ckpt")
    saved = torch.load(tmp_path / "final.ckpt", weights_only=True)
    assert saved[PRECISION_KEY]["scale"] == fitted, (saved[PRECISION_KEY], fitted)
