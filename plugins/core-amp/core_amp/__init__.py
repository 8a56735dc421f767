"""core-amp: the ``16-mixed`` and ``bf16-mixed`` precisions of ``core``, through ``torch.autocast``."""

from __future__ import annotations

from ._mixed import (
    BFLOAT_MIXED_SUPPORTS,
    HALF_MIXED_SUPPORTS,
    MixedPrecision,
    bfloat_mixed,
    half_mixed,
    legacy_16,
    legacy_bf16,
)

__all__ = [
    "BFLOAT_MIXED_SUPPORTS",
    "HALF_MIXED_SUPPORTS",
    "MixedPrecision",
    "bfloat_mixed",
    "half_mixed",
    "legacy_16",
    "legacy_bf16",
]
