"""Which submodules become their own FSDP unit, and applying ``fully_shard`` to them, innermost first.

Each unit gathers its parameters just before its forward and frees them after (with
``reshard_after_forward``), so smaller units mean a lower peak of full parameters in memory. The root
module is always a unit: it holds whatever no inner unit took.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeAlias

import torch
from torch.distributed.fsdp import fully_shard

from core import ConfigurationError

AutoWrapPolicy: TypeAlias = Collection[type[torch.nn.Module]] | int | Callable[[torch.nn.Module], bool] | None
"""Module classes to wrap, a minimum parameter count per unit, a predicate on a module, or ``None``."""

Predicate = Callable[[torch.nn.Module, int], bool]


def _own_parameter_count(module: torch.nn.Module, wrapped: set[int]) -> int:
    """Parameters of ``module`` and its descendants, minus those inside an already wrapped descendant."""
    total = 0
    for child in module.children():
        if id(child) not in wrapped:
            total += _own_parameter_count(child, wrapped)
    return total + sum(parameter.numel() for parameter in module.parameters(recurse=False))


def predicate(policy: AutoWrapPolicy) -> Predicate | None:
    """``policy`` as ``(module, unwrapped_parameter_count) -> wrap?``; ``None`` wraps the root only."""
    if policy is None:
        return None
    if isinstance(policy, bool):
        raise ConfigurationError(
            f"auto_wrap_policy={policy!r} is not a policy; pass module classes ({{torch.nn.TransformerEncoderLayer}}), "
            f"a minimum parameter count (1_000_000) or a function module -> bool."
        )
    if isinstance(policy, int):
        if policy < 1:
            raise ConfigurationError(f"auto_wrap_policy={policy!r}: a minimum parameter count must be >= 1.")
        return lambda module, count: count >= policy
    if isinstance(policy, (set, frozenset, list, tuple)):
        classes = tuple(policy)
        bad = [item for item in classes if not (isinstance(item, type) and issubclass(item, torch.nn.Module))]
        if bad or not classes:
            raise ConfigurationError(
                f"auto_wrap_policy={policy!r}: expected torch.nn.Module subclasses, got {bad or 'none'}."
            )
        return lambda module, count: isinstance(module, classes)
    if callable(policy):
        function = policy
        return lambda module, count: bool(function(module))
    raise ConfigurationError(
        f"auto_wrap_policy={policy!r} is not a policy; pass module classes, a minimum parameter count or a "
        f"function module -> bool."
    )


def _post_order(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def units(root: torch.nn.Module, policy: AutoWrapPolicy) -> list[torch.nn.Module]:
    """The submodules to shard as their own units, innermost first; the root is not among them."""
    wants = predicate(policy)
    if wants is None:
        return []
    chosen: list[torch.nn.Module] = []
    wrapped: set[int] = set()
    for module in _post_order(root):
        if module is root or id(module) in wrapped:
            continue
        count = _own_parameter_count(module, wrapped)
        if count > 0 and wants(module, count):
            chosen.append(module)
            wrapped.add(id(module))
    return chosen


def shard(root: torch.nn.Module, policy: AutoWrapPolicy, options: dict[str, Any]) -> list[torch.nn.Module]:
    """``fully_shard`` each unit chosen by ``policy``, then the root; returns every sharded module."""
    sharded = units(root, policy)
    for module in sharded:
        fully_shard(module, **options)
    fully_shard(root, **options)
    return [*sharded, root]

