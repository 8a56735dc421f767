"""core-cuda: the ``cuda`` accelerator of ``core`` (also selectable as ``gpu``)."""

from __future__ import annotations

from ._accelerator import CUDAAccelerator, visible_device_count
from ._devices import cuda_unavailable_reason, describe_visible, parse_cuda_devices, visible_entries

__all__ = [
    "CUDAAccelerator",
    "cuda_unavailable_reason",
    "describe_visible",
    "parse_cuda_devices",
    "visible_device_count",
    "visible_entries",
]
