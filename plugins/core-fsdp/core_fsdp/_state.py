"""How much of a module this rank holds: its shards' elements, for sharded parameters.

Moving state between ``DTensor`` shards and whole tensors is the core's (:mod:`core.toolkit.strategies`:
``gather_full_state``, ``accept_whole_tensors``, ``accept_whole_optimizer_state``), shared with core-model-parallel.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def local_elements(module: torch.nn.Module) -> int:
    """How many parameter elements this rank holds (its shards, for sharded parameters)."""
    return sum(
        parameter.to_local().numel() if isinstance(parameter, DTensor) else parameter.numel()
        for parameter in module.parameters()
    )
