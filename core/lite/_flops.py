"""The peak flops of each device Lightning tabulates, and :func:`get_available_flops` (its chip-name rules).

The numbers are Lightning 2.6's ``_CUDA_FLOPS`` and ``_TPU_FLOPS`` (vendor datasheets, dense): the optimistic upper
bound a device reaches on large matrix multiplications, the denominator of the MFU.
"""

from __future__ import annotations

import warnings
from typing import Final

import torch

from core._errors import CoreWarning

CUDA_FLOPS: Final[dict[str, dict[str, float]]] = {
    "h200 sxm1": {
        "float64": 3.4e13, "float32": 6.7e13, "tfloat32": 9.9e14,
        "bfloat16": 2.0e15, "float16": 2.0e15, "int8": 4.0e15,
    },
    "h200 nvl1": {
        "float64": 3.0e13, "float32": 6.0e13, "tfloat32": 8.4e14,
        "bfloat16": 1.7e15, "float16": 1.7e15, "int8": 3.3e15,
    },
    "h100 nvl": {
        "float64": 67e12, "float32": 133.8e12, "tfloat32": 989.4e12,
        "bfloat16": 1978.8e12, "float16": 1978.8e12, "int8": 3957.8e12,
    },
    "h100 sxm": {
        "float64": 33.5e12, "float32": 66.9e12, "tfloat32": 494.7e12,
        "bfloat16": 989.4e12, "float16": 989.4e12, "int8": 1978.9e12,
    },
    "h100 pcie": {
        "float64": 25.6e12, "float32": 51.2e12, "tfloat32": 378e12,
        "bfloat16": 756e12, "float16": 756e12, "int8": 1513e12,
    },
    "rtx 4090": {
        "float32": 82.6e12, "tfloat32": 82.6e12, "bfloat16": 82.6e12,
        "float16": 82.6e12, "int8": 660.6e12, "int4": 1321.2e12,
    },
    "rtx 4080": {
        "float32": 48.7e12, "tfloat32": 48.7e12, "bfloat16": 48.7e12,
        "float16": 48.7e12, "int8": 389.9e12, "int4": 779.8e12,
    },
    "rtx 4080 super": {
        "float32": 52.2e12, "tfloat32": 52.2e12, "bfloat16": 52.2e12,
        "float16": 52.2e12, "int8": 417.6e12, "int4": 835.2e12,
    },
    "l4": {
        "float32": 30.3e12, "tfloat32": 60e12, "bfloat16": 121e12,
        "float16": 121e12, "int8": 242e12, "int4": 484e12,
    },
    "l40": {
        "float32": 90.5e12, "tfloat32": 90.5e12, "bfloat16": 181e12,
        "float16": 181e12, "int8": 362e12, "int4": 724e12,
    },
    "a100": {
        "float64": 9.7e12, "float32": 19.5e12, "tfloat32": 156e12,
        "bfloat16": 312e12, "float16": 312e12, "int8": 624e12,
    },
    "a6000": {
        "float32": 38.7e12, "tfloat32": 77.4e12, "bfloat16": 38.7e12,
        "float16": 38.7e12, "int8": 309.7e12, "int4": 619.3e12,
    },
    "a40": {
        "float32": 37.4e12, "tfloat32": 74.8e12, "bfloat16": 37.4e12,
        "float16": 37.4e12, "int8": 299.3e12, "int4": 598.7e12,
    },
    "a10g": {
        "float32": 31.2e12, "tfloat32": 62.5e12, "bfloat16": 125e12,
        "float16": 125e12, "int8": 250e12, "int4": 500e12,
    },
    "rtx 3090 ti": {
        "float32": 40e12, "tfloat32": 40e12, "bfloat16": 40e12,
        "float16": 40e12, "int8": 320e12, "int4": 640e12,
    },
    "rtx 3090": {
        "float32": 35.6e12, "tfloat32": 35.6e12, "bfloat16": 35.6e12,
        "float16": 35.6e12, "int8": 284e12, "int4": 568e12,
    },
    "rtx 3080 ti": {
        "float32": 34.1e12, "tfloat32": 34.1e12, "bfloat16": 34.1e12,
        "float16": 34.1e12, "int8": 272.8e12, "int4": 546.6e12,
    },
    "rtx 3080": {
        "float32": 29.8e12, "tfloat32": 29.8e12, "bfloat16": 29.8e12,
        "float16": 29.8e12, "int8": 238e12, "int4": 476e12,
    },
    "rtx 3070": {
        "float32": 20.3e12, "tfloat32": 20.3e12, "bfloat16": 20.3e12,
        "float16": 20.3e12, "int8": 162.6e12, "int4": 325.2e12,
    },
    "t4": {"float32": 8.1e12, "float16": 65e12, "int8": 130e12, "int4": 260e12},
    "quadro rtx 5000": {"float32": 11.2e12, "float16": 89.2e12},
    "rtx 2080 super": {"float32": 11.2e12, "float16": 22.3e12, "int8": 178.4e12, "int4": 356.8e12},
    "rtx 2080 ti": {"float32": 14.2e12, "float16": 28.5e12, "int8": 227.7e12, "int4": 455.4e12},
    "rtx 2080": {"float32": 10.6e12, "float16": 21.2e12, "int8": 169.6e12, "int4": 339.1e12},
    "rtx 2070 super": {"float32": 9.1e12, "float16": 18.1e12, "int8": 145e12, "int4": 290e12},
    "titan rtx": {"float32": 16.3e12, "float16": 32.6e12, "int8": 261e12, "int4": 522e12},
    "v100 sxm": {"float64": 7.8e12, "float32": 15.7e12, "float16": 125e12},
    "v100 pcie": {"float64": 7e12, "float32": 14e12, "float16": 112e12},
    "v100s pcie": {"float64": 8.2e12, "float32": 16.4e12, "float16": 130e12},
}
"""Peak flops per second of each NVIDIA chip, by dtype name (``"tfloat32"``: float32 matmuls on tensor cores)."""

TPU_FLOPS: Final[dict[str, float]] = {"v2": 45e12, "v3": 123e12, "v4": 275e12, "v5litepod": 197e12}
"""Peak flops per second of each TPU generation (bfloat16 matmuls, whatever the dtype)."""

# Lightning's order matters: "h200" before "h100", "geforce rtx" before the bare model numbers.
_CUDA_CHIPS: Final = (
    ("a6000", "a6000"), ("a100", "a100"), ("a40", "a40"), ("a10g", "a10g"), ("t4", "t4"),
    ("quadro rtx 5000", "quadro rtx 5000"), ("titan rtx", "titan rtx"), ("v100-sxm", "v100 sxm"),
    ("v100-pcie", "v100 pcie"), ("v100s-pcie", "v100s pcie"),
)


def cuda_chip(device_name: str) -> str | None:
    """The :data:`CUDA_FLOPS` key of a CUDA device name (``"NVIDIA H100 80GB HBM3"`` -> ``"h100 sxm"``), or None."""
    chip = device_name.lower()
    if "h200" in chip:
        # Lightning maps only names with "sxm1"/"nvl1"; torch names the SXM part plainly "NVIDIA H200".
        return "h200 nvl1" if "nvl" in chip else "h200 sxm1"
    if "h100" in chip:
        if "hbm3" in chip:
            return "h100 sxm"
        if "nvl" in chip:
            return "h100 nvl"
        return "h100 pcie" if "pcie" in chip or "hbm2e" in chip else chip
    if "l4" in chip:
        return "l40" if "tesla" in chip else "l4"
    if "geforce rtx" in chip:
        extra = " super" if "super" in chip else " ti" if "ti" in chip else ""
        return f"rtx {chip.split(' ')[3]}{extra}"
    return next((name for part, name in _CUDA_CHIPS if part in chip), None)


def _warn(message: str) -> None:
    warnings.warn(message, CoreWarning, stacklevel=3)


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The peak flops per second of ``device`` computing in ``dtype``, or None (with a warning) when the device is
    not in the table (Lightning's ``get_available_flops``: CPUs and MPS have none, without a warning).

    float32 counts as ``"tfloat32"`` on an Ampere or later GPU when ``torch.get_float32_matmul_precision()`` is not
    ``"highest"``, as in Lightning.
    """
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
        chip = cuda_chip(device_name)
        if chip is None:
            _warn(f"FLOPs not found for {device_name!r}")
            return None
        if chip not in CUDA_FLOPS:
            _warn(f"FLOPs not found for {device_name!r}, chip is {chip!r}")
            return None
        if dtype is torch.float32 and torch.cuda.get_device_capability(device)[0] >= 8 and (
            torch.get_float32_matmul_precision() != "highest"
        ):
            dtype = "tfloat32"
        name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        if name not in CUDA_FLOPS[chip]:
            _warn(f"{device_name!r} does not support {dtype}")
            return None
        return int(CUDA_FLOPS[chip][name])
    if device.type == "xla":
        from torch_xla._internal import tpu  # type: ignore[import-not-found]

        environment = tpu.get_tpu_env()
        device_name = environment.get("TYPE") or environment["ACCELERATOR_TYPE"].split("-")[0]
        if device_name.lower() not in TPU_FLOPS:
            _warn(f"FLOPs not found for TPU {device_name!r} with {dtype}")
            return None
        return int(TPU_FLOPS[device_name.lower()])
    return None
