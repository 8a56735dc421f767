"""``dp``: ``torch.nn.DataParallel``, one process splitting each batch over several CUDA devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from core import Supports, hookimpl
from core.toolkit.strategies import SingleDeviceStrategy


class DataParallelStrategy(SingleDeviceStrategy):
    """One process drives every visible CUDA device; replicas are rebuilt from device 0 on each forward.

    Kept for Lightning users who know it; ``ddp`` is faster on every setup where both work.
    """

    name: ClassVar[str] = "dp"
    max_processes: ClassVar[int | None] = None
    process_per_device: ClassVar[bool] = False
    supports: ClassVar[Supports] = Supports(
        only={"accelerator": {"cuda"}},
        hint="DataParallel splits each batch over several CUDA devices inside one process, so it needs "
             "accelerator='cuda' (pip install core-cuda). On the CPU use strategy='ddp' with devices=N "
             "(N processes); on one GPU use strategy='single_device'.",
    )

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        device_ids: Sequence[int] = self.active.config.device_ids
        return torch.nn.DataParallel(module, device_ids=list(device_ids))
