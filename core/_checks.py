"""Argument checks shared by core's modules (private: plugins have their own)."""

from __future__ import annotations

from typing import TypeGuard


def is_whole(value: object, minimum: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` that is not a ``bool`` (``True`` is an int to Python, never a count to us),
    and at least ``minimum`` when one is given."""
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)
