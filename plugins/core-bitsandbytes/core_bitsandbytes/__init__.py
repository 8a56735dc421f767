"""core-bitsandbytes: 4-bit and 8-bit weights for ``core`` (nf4, nf4-dq, fp4, fp4-dq, int8, int8-training)."""

from __future__ import annotations

from ._quantized import (
    MODES,
    QUANTIZED_SUPPORTS,
    BitsandbytesPrecision,
    fp4,
    fp4_dq,
    int8,
    int8_training,
    nf4,
    nf4_dq,
)

__all__ = [
    "MODES",
    "QUANTIZED_SUPPORTS",
    "BitsandbytesPrecision",
    "fp4",
    "fp4_dq",
    "int8",
    "int8_training",
    "nf4",
    "nf4_dq",
]
