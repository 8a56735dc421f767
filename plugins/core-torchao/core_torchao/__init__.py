"""core-torchao: float8 training for ``core`` through torchao (``fp8``, ``fp8-rowwise``, ``fp8-rowwise-gw-hp``)."""

from __future__ import annotations

from ._float8 import (
    FLOAT8_SUPPORTS,
    MIN_CAPABILITY,
    RECIPES,
    Float8Precision,
    fp8,
    fp8_rowwise,
    fp8_rowwise_gw_hp,
    hardware_float8,
)

__all__ = [
    "FLOAT8_SUPPORTS",
    "MIN_CAPABILITY",
    "RECIPES",
    "Float8Precision",
    "fp8",
    "fp8_rowwise",
    "fp8_rowwise_gw_hp",
    "hardware_float8",
]
