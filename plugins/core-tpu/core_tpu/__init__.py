"""core-tpu: TPUs for ``core`` through torch_xla: the ``tpu`` accelerator and the ``xla`` / ``single_xla`` strategies.

Nothing here imports torch_xla until a TPU is actually used, so the plugins list and explain
themselves on machines without it.
"""

from __future__ import annotations

from ._accelerator import TPU_SUPPORTS, XLA_STRATEGIES, TPUAccelerator
from ._runtime import XLAProbe, parse_xla_devices, probe, xla_unavailable_reason
from ._strategies import XLA_STRATEGY_SUPPORTS, SingleXLAStrategy, XLAStrategy

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
    "xla_unavailable_reason",
]
