"""Turning a ``Lite.save`` state into plain state dicts, and restoring a loaded one in place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from core._errors import CheckpointError, ConfigurationError

PRECISION_KEY: Final = "core/precision"
"""Where a precision with its own state (a gradient scaler) keeps it in the checkpoint."""

Filter = Mapping[str, Callable[[str, Any], bool]]


def is_stateful(value: object) -> bool:
    """Modules, optimizers, schedulers: anything with ``state_dict`` and ``load_state_dict``."""
    return (
        not isinstance(value, type)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


def _check_filter(state: Mapping[str, Any], filter: Filter | None) -> None:
    for key, predicate in (filter or {}).items():
        if key not in state:
            raise ConfigurationError(
                f"save(filter=...) names the key {key!r}, which the state does not have; state keys: {sorted(state)}."
            )
        if not callable(predicate):
            raise ConfigurationError(
                f"save(filter={{{key!r}: {predicate!r}}}): expected a function (name, value) -> bool."
            )


def to_checkpoint(state: Mapping[str, Any], filter: Filter | None, precision_state: dict[str, Any]) -> dict[str, Any]:
    """The state with every stateful object replaced by its state dict, filtered, plus the precision's state."""
    if PRECISION_KEY in state:
        raise ConfigurationError(f"The state key {PRECISION_KEY!r} is reserved for the precision's own state.")
    _check_filter(state, filter)
    checkpoint: dict[str, Any] = {}
    for key, value in state.items():
        converted = value.state_dict() if is_stateful(value) else value
        predicate = (filter or {}).get(key)
        if predicate is not None:
            if not isinstance(converted, Mapping):
                raise ConfigurationError(
                    f"save(filter=...) applies to {key!r}, but its value is a {type(converted).__name__}, not a "
                    f"state dict."
                )
            converted = {name: item for name, item in converted.items() if predicate(name, item)}
        checkpoint[key] = converted
    if precision_state:
        checkpoint[PRECISION_KEY] = precision_state
    return checkpoint


def restore(state: dict[str, Any], checkpoint: dict[str, Any], strict: bool, path: str) -> dict[str, Any]:
    """Load ``checkpoint`` into the objects of ``state`` in place and return the entries it did not ask for.

    Stateful objects get ``load_state_dict``; plain values in ``state`` are replaced by the saved ones.
    """
    missing = sorted(key for key in state if key not in checkpoint)
    if strict and missing:
        raise CheckpointError(
            f"The checkpoint {path!r} has no entry for {missing}; it holds {sorted(checkpoint)}. "
            f"Pass strict=False to load what is there."
        )
    for key, target in list(state.items()):
        if key not in checkpoint:
            continue
        saved = checkpoint.pop(key)
        if is_stateful(target):
            _load_into(target, saved, strict)
        else:
            state[key] = saved
    return checkpoint


def _load_into(target: Any, saved: Any, strict: bool) -> None:
    import torch

    if isinstance(target, torch.nn.Module):
        target.load_state_dict(saved, strict=strict)
    else:
        target.load_state_dict(saved)
