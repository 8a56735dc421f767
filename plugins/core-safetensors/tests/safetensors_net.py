"""The small module of the layout tests, shared by the test process and scripts/layouts_job.py."""

from __future__ import annotations

import torch
from torch import nn

MAX_SHARD_SIZE = 1024  # bytes: Net's tensors spread over five files


class Net(nn.Module):
    """Tensor parallelism splits both linears; fsdp splits every parameter on dim 0, ``gain`` unevenly (3 + 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale: torch.Tensor
        self.register_buffer("scale", torch.tensor([2.0, 0.5]))
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, 5))
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(inputs))) * self.scale[0] * self.gain.sum()


def reference() -> dict[str, torch.Tensor]:
    """The weights every layout loads and must give back bitwise."""
    torch.manual_seed(0)
    return Net().state_dict()
