"""Run by tests/test_callbacks_exception_throughput.py on two ``ddp`` processes with an OnExceptionCheckpoint.

    python on_exception_ddp.py <failing rank: 0, 1 or -1 for both> <checkpoint directory> [backend]

The chosen rank(s) raise at global step 3; the script's exit status and the directory tell what happened. With a
third argument (``nccl``), ``torch.distributed.get_backend()`` answers it instead of ``gloo``: the callback then
cannot use the run's group and must agree over the gloo group of its own, as on a GPU run (NCCL itself is not
exercised: this machine has no GPU).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import OnExceptionCheckpoint


class Net(core.Module):
    def __init__(self, failing_rank: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 1)
        self.failing_rank = failing_rank

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 3 and self.failing_rank in (-1, self.global_rank):
            raise RuntimeError(f"failing on global rank {self.global_rank}")
        inputs, targets = batch
        return F.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(failing_rank: int, directory: str) -> None:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 6, generator=generator), torch.randn(64, 1, generator=generator))
    trainer = core.Trainer(
        accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[OnExceptionCheckpoint(directory, timeout=3)],
    )
    trainer.fit(Net(failing_rank), DataLoader(data, batch_size=4))


if __name__ == "__main__":
    if len(sys.argv) > 3:
        import torch.distributed as dist

        dist.get_backend = lambda group=None: dist.Backend(sys.argv[3])
    main(int(sys.argv[1]), sys.argv[2])
