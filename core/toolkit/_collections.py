"""Applying a function to every tensor of a nested batch (dicts, lists, tuples, named tuples)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch


def apply_to_tensors(data: Any, function: Callable[[torch.Tensor], Any]) -> Any:
    """Return ``data`` with every tensor replaced by ``function(tensor)``; other leaves are kept."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, Mapping):
        return type(data)({key: apply_to_tensors(value, function) for key, value in data.items()})  # type: ignore[call-arg]
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(apply_to_tensors(value, function) for value in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_tensors(value, function) for value in data)
    return data
