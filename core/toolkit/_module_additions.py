"""Undoing what a wrapper added to a module in place: its attributes and hook registrations.

Sharding strategies (``fully_shard``, DeepSpeed's ZeRO-3) change the user's module in place; to give it back as a
plain module at the end of a run they record, before set-up, which attributes and hook handles it had
(:func:`hook_keys`, ``vars(module)``), and afterwards remove whatever was added (:func:`remove_added`).
"""

from __future__ import annotations

from typing import Any

import torch


def hook_keys(module: torch.nn.Module) -> dict[str, frozenset[Any]]:
    """The handle ids in each of ``module``'s hook dictionaries (``_forward_pre_hooks``, ``_state_dict_hooks``...)."""
    return {name: frozenset(value) for name, value in vars(module).items()
            if "hooks" in name and isinstance(value, dict)}


def remove_added(module: torch.nn.Module, attributes: frozenset[str], hooks: dict[str, frozenset[Any]]) -> None:
    """Remove the hooks and instance attributes of ``module`` that are not in the recorded ones."""
    for name, keys in hook_keys(module).items():
        registered = vars(module)[name]
        for key in keys - hooks.get(name, frozenset()):
            del registered[key]
    for name in set(vars(module)) - attributes:
        delattr(module, name)
