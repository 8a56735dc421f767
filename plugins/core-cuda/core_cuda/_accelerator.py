"""The ``cuda`` accelerator (alias ``gpu``): one process per NVIDIA GPU, nccl between them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

import torch

from core import ConfigurationError, DeviceRequest, hookimpl
from core.toolkit import require_accelerator

from ._devices import cuda_unavailable_reason, parse_cuda_devices


def visible_device_count() -> int:
    """CUDA devices torch can see. Counted through NVML where possible, so a later fork stays safe."""
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


class CUDAAccelerator:
    """Computes on NVIDIA GPUs; ``devices=[1, 3]`` runs two processes, on the GPUs with those indices."""

    kind: Final = "accelerator"
    name: Final = "cuda"
    priority: Final = 20  # accelerator="auto" asks tpu (30), then cuda, then mps (10), then cpu (0)

    def unavailable_reason(self) -> str | None:
        """Why this accelerator cannot run here, or ``None`` when it can (read by ``--check``)."""
        return cuda_unavailable_reason(
            built=torch.backends.cuda.is_built(),
            device_count=visible_device_count(),
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            torch_version=torch.__version__,
        )

    def _require_available(self) -> None:
        require_accelerator("cuda", "core-cuda", self.unavailable_reason())

    @hookimpl
    def accelerator_is_available(self) -> bool:
        return visible_device_count() > 0

    @hookimpl
    def accelerator_device_count(self) -> int:
        return visible_device_count()

    @staticmethod
    def auto_device_count() -> int:
        """The CUDA devices this process can see, 0 without any (Lightning's ``CUDAAccelerator.auto_device_count``)."""
        return visible_device_count()

    @hookimpl
    def accelerator_parse_devices(self, devices: DeviceRequest) -> list[int]:
        self._require_available()
        return parse_cuda_devices(devices, visible_device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        self._require_available()
        if not 0 <= local_rank < len(device_ids):
            raise ConfigurationError(
                f"local_rank={local_rank} has no CUDA device: this node runs {len(device_ids)} process(es) on "
                f"devices {list(device_ids)}. Check LOCAL_RANK and the devices argument."
            )
        device = torch.device("cuda", device_ids[local_rank])
        torch.cuda.set_device(device)
        return device

    @hookimpl
    def accelerator_process_group_backend(self) -> str:
        return "nccl"

    @hookimpl
    def accelerator_teardown(self) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        return None

    def device_stats(self, device: torch.device) -> dict[str, Any]:
        """The caching allocator's statistics of ``device`` (``torch.cuda.memory_stats``), for logging."""
        return dict(torch.cuda.memory_stats(device))

    def __repr__(self) -> str:
        return "CUDAAccelerator()"
