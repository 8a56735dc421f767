"""The one walker over nested tensors: batches, state dicts, checkpoints (dicts, lists, tuples, named tuples).

Every place that maps the tensors of a nested value goes through :func:`apply_to_tensors`, so that what a
container carries besides its items survives the trip: a module's ``state_dict()`` is an ``OrderedDict``
whose ``_metadata`` attribute holds the modules' version numbers, which ``load_state_dict`` reads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch


def apply_to_tensors(data: Any, function: Callable[[Any], Any], *, leaf: type = torch.Tensor) -> Any:
    """Return ``data`` with every tensor replaced by ``function(tensor)``; other leaves are kept as they are.

    ``leaf`` is the type that counts as a tensor (a lazily loaded checkpoint's ``NotYetLoadedTensor``, say).

    Containers are rebuilt with their own type: mappings (with a copy of their attributes, such as a state
    dict's ``_metadata``), lists, tuples and named tuples. A tensor reachable twice (tied weights) is mapped
    once and its result shared, so what was tied stays tied.
    """
    return _walk(data, function, {}, leaf)


def _walk(data: Any, function: Callable[[Any], Any], mapped: dict[int, Any], leaf: type) -> Any:
    if isinstance(data, leaf):
        key = id(data)
        if key not in mapped:
            mapped[key] = (data, function(data))  # the tensor is kept alive, so its id is not reused
        return mapped[key][1]
    if isinstance(data, Mapping):
        items = [(name, _walk(value, function, mapped, leaf)) for name, value in data.items()]
        rebuilt = type(data)(items) if isinstance(data, dict) else dict(items)
        attributes = getattr(data, "__dict__", None)
        if attributes:
            rebuilt.__dict__.update(copy.deepcopy(attributes))
        return rebuilt
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(_walk(value, function, mapped, leaf) for value in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_walk(value, function, mapped, leaf) for value in data)
    return data


def named_tensors(data: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of a nested value with its dotted path (``"model.0.weight"``, ``"optimizer.state.0.exp_avg"``),
    in the order :func:`apply_to_tensors` visits them (a tensor reachable twice is named twice)."""
    if isinstance(data, torch.Tensor):
        yield prefix, data
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield from named_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            yield from named_tensors(value, f"{prefix}.{index}" if prefix else str(index))
