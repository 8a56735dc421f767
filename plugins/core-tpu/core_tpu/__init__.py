"""core-tpu: TPUs for ``core`` through torch_xla: the ``tpu`` accelerator and the ``xla`` / ``single_xla`` strategies.

``tpu_spawn`` is Lightning 1.x's name for ``xla`` (a legacy alias: the same strategy object).

Nothing here imports torch_xla until a TPU is actually used, so the plugins list and explain
themselves on machines without it.
"""

from __future__ import annotations

from ._accelerator import TPU_SUPPORTS, XLA_STRATEGIES, TPUAccelerator
from ._runtime import XLAProbe, parse_xla_devices, probe, xla_unavailable_reason
from ._strategies import XLA_STRATEGY_SUPPORTS, SingleXLAStrategy, XLAStrategy


def tpu_spawn() -> XLAStrategy:
    """``tpu_spawn``: the Lightning 1.x name (a legacy alias) for ``xla``, one process per TPU device."""
    return XLAStrategy()


__all__ = [
    "TPU_SUPPORTS",
    "XLA_STRATEGIES",
    "XLA_STRATEGY_SUPPORTS",
    "SingleXLAStrategy",
    "TPUAccelerator",
    "XLAProbe",
    "XLAStrategy",
    "parse_xla_devices",
    "probe",
    "tpu_spawn",
    "xla_unavailable_reason",
]
