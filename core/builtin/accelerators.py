"""The ``cpu`` accelerator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import torch

from core._errors import ConfigurationError
from core._markers import hookimpl
from core.registry._devices import DeviceRequest


class CPUAccelerator:
    """Computes on the CPU; ``devices=N`` runs N processes on this node."""

    kind: Final = "accelerator"
    name: Final = "cpu"
    priority: Final = 0  # the last resort of accelerator="auto"

    @hookimpl
    def accelerator_is_available(self) -> bool:
        return True

    @hookimpl
    def accelerator_device_count(self) -> int:
        return 1

    @staticmethod
    def auto_device_count() -> int:
        """Devices ``devices="auto"`` uses: one process on the CPU (Lightning's ``auto_device_count``)."""
        return 1

    @hookimpl
    def accelerator_parse_devices(self, devices: DeviceRequest) -> list[int]:
        if devices.auto:
            return [0]
        if devices.count is not None:
            return list(range(devices.count))
        raise ConfigurationError(
            f"The cpu accelerator takes a number of processes, got devices={devices}; pass an int such as "
            f"devices=2 (or '2'). Device indices and -1 only make sense for accelerators with numbered devices."
        )

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        return torch.device("cpu")

    @hookimpl
    def accelerator_process_group_backend(self) -> str:
        return "gloo"
