"""Whether a module was parallelized.

Moving state between ``DTensor`` parameters and whole tensors is the core's (:mod:`core.toolkit.strategies`:
``full_state_dict``, ``gather_full_state``, ``accept_whole_tensors``, ``accept_whole_optimizer_state``), shared
with core-fsdp.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def holds_placed_tensors(module: torch.nn.Module) -> bool:
    """Whether any parameter of ``module`` is a ``DTensor`` (it was parallelized)."""
    return any(isinstance(parameter, DTensor) for parameter in module.parameters())
