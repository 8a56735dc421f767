"""The ``tpu`` accelerator: Google TPUs through torch_xla's PJRT runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import torch

from core import DeviceRequest, Supports, hookimpl
from core.toolkit import require_accelerator

from . import _runtime

XLA_STRATEGIES: Final = frozenset({"xla", "single_xla"})

TPU_SUPPORTS: Final = Supports(
    only={"strategy": XLA_STRATEGIES},
    never={"precision": {"64-true"}},
    hint=(
        "On TPU use strategy='xla' (one process per device) or strategy='single_xla' (one device); float64 "
        "is not supported there, and bf16-mixed or bf16-true are the TPU-native reduced precisions."
    ),
)


class TPUAccelerator:
    """Computes on TPU devices through torch_xla; without torch_xla it loads but reports why it cannot run."""

    kind: Final = "accelerator"
    name: Final = "tpu"
    priority: Final = 30  # accelerator="auto" asks tpu first, then cuda (20), mps (10) and cpu (0)
    # strategy="auto" on TPUs: XLA's own strategies, never the DDP family.
    auto_strategies: Final = {"single": "single_xla", "multi": "xla", "interactive": "xla"}
    supports: Final = TPU_SUPPORTS

    def unavailable_reason(self) -> str | None:
        """Why this accelerator cannot run here, or ``None`` when it can (read by ``--check``)."""
        return _runtime.current_reason()

    def _require_available(self) -> None:
        require_accelerator("tpu", "core-tpu", self.unavailable_reason())

    @hookimpl
    def accelerator_is_available(self) -> bool:
        return _runtime.current_reason() is None

    @hookimpl
    def accelerator_device_count(self) -> int:
        return _runtime.probe().device_count

    @hookimpl
    def accelerator_parse_devices(self, devices: DeviceRequest) -> list[int]:
        self._require_available()
        return _runtime.parse_xla_devices(devices, _runtime.probe().device_count)

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        self._require_available()
        return _runtime.xla_device()

    @hookimpl
    def accelerator_process_group_backend(self) -> str:
        return "xla"

    def __repr__(self) -> str:
        return "TPUAccelerator()"
