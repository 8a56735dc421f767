"""The ``mps`` accelerator: the GPU of an Apple-silicon Mac, through Metal Performance Shaders.

MPS has one device and no collective backend, so it runs a single process; and it has no float64.
Both limits are declared in ``supports``, so the resolver refuses such combinations before a run starts.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any, Final

import torch

from core import ConfigurationError, DeviceRequest, Supports, hookimpl
from core.toolkit import require_accelerator

MPS_SUPPORTS: Final = Supports(
    only={"strategy": {"single_device"}},
    never={"precision": {"64-true"}},
    hint=(
        "MPS runs one process on its single device and has no float64: use strategy='single_device' with "
        "devices=1 and a precision other than '64-true', or accelerator='cpu' for DDP-family strategies and float64."
    ),
)


def mps_unavailable_reason(
    *, system: str, machine: str, built: bool, available: bool, torch_version: str
) -> str | None:
    """Why MPS cannot be used here, or ``None`` when it can. A pure function of what the platform reports."""
    if system != "Darwin":
        return f"MPS exists only on macOS with Apple silicon, and this machine runs {system} on {machine}"
    if not built:
        return f"this torch build ({torch_version}) was compiled without MPS; install the macOS arm64 wheel of torch"
    if not available:
        return f"torch was built with MPS but cannot use it: it needs macOS 12.3 or later on Apple silicon ({machine})"
    return None


def parse_mps_devices(request: DeviceRequest) -> list[int]:
    """MPS has exactly one device: ``1``, ``[0]``, ``-1`` and ``auto`` select it; anything else is an error."""
    if request.auto or request.all_visible or request.count == 1 or request.indices == (0,):
        return [0]
    raise ConfigurationError(
        f"devices={request} cannot be met: MPS has exactly one device and runs one process. Pass devices=1, "
        f"or accelerator='cpu' with devices=N for N processes."
    )


class MPSAccelerator:
    """Computes on the Apple-silicon GPU in one process."""

    kind: Final = "accelerator"
    name: Final = "mps"
    priority: Final = 10  # accelerator="auto" asks tpu (30), then cuda (20), then mps, then cpu (0)
    supports: Final = MPS_SUPPORTS

    def unavailable_reason(self) -> str | None:
        """Why this accelerator cannot run here, or ``None`` when it can (read by ``--check``)."""
        return mps_unavailable_reason(
            system=platform.system(),
            machine=platform.machine(),
            built=torch.backends.mps.is_built(),
            available=torch.backends.mps.is_available(),
            torch_version=torch.__version__,
        )

    def _require_available(self) -> None:
        require_accelerator("mps", "core-mps", self.unavailable_reason())

    @hookimpl
    def accelerator_is_available(self) -> bool:
        return bool(torch.backends.mps.is_available())

    @hookimpl
    def accelerator_device_count(self) -> int:
        return 1 if torch.backends.mps.is_available() else 0

    @hookimpl
    def accelerator_parse_devices(self, devices: DeviceRequest) -> list[int]:
        self._require_available()
        return parse_mps_devices(devices)

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        self._require_available()
        return torch.device("mps", 0)

    @hookimpl
    def accelerator_process_group_backend(self) -> str:
        # MPS tensors cannot travel through any torch.distributed backend; gloo only serves CPU-side objects.
        return "gloo"

    @hookimpl
    def accelerator_teardown(self) -> None:
        if torch.backends.mps.is_available():
            torch.mps.empty_cache()
        return None

    def device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory held by tensors and by the Metal driver, in bytes, for logging."""
        return {
            "current_allocated_memory": torch.mps.current_allocated_memory(),
            "driver_allocated_memory": torch.mps.driver_allocated_memory(),
        }

    def __repr__(self) -> str:
        return "MPSAccelerator()"
