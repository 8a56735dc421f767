"""Whole tensors of ``DTensor`` s, for the release at teardown, and whether a module was parallelized.

Moving state between ``DTensor`` parameters and whole tensors for checkpoints is the core's
(:mod:`core.toolkit.strategies`: ``gather_full_state``, ``accept_whole_tensors``, ``accept_whole_optimizer_state``),
shared with core-fsdp.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from core.toolkit.strategies import gather_full_state


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of ``tensor`` on the CPU: gathered if it is a ``DTensor`` (collective), else itself."""
    gathered: torch.Tensor = gather_full_state(tensor)
    return gathered


def holds_placed_tensors(module: torch.nn.Module) -> bool:
    """Whether any parameter of ``module`` is a ``DTensor`` (it was parallelized)."""
    return any(isinstance(parameter, DTensor) for parameter in module.parameters())
