"""What torch_xla reports about this machine, gathered once; and the pure rules built on it.

``torch_xla`` is imported here and in the hooks that run on a TPU, never at module import, so the
plugins of this distribution load, list and explain themselves on machines without it.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import attrs
import torch

from core import ConfigurationError, DeviceRequest


def xla(module: str = "") -> Any:
    """Import ``torch_xla`` or one of its submodules (``xla("core.xla_model")``) when a hook needs it.

    torch_xla ships no type information and is absent wherever there is no TPU, so it is typed ``Any``.
    """
    return importlib.import_module(f"torch_xla.{module}" if module else "torch_xla")


@attrs.frozen
class XLAProbe:
    """The facts that decide whether a TPU can be used: the import error, the runtime's device type and count."""

    import_error: str | None
    device_type: str | None = None
    device_count: int = 0
    runtime_error: str | None = None


def _torch_release() -> str:
    return torch.__version__.split("+")[0]


@functools.lru_cache(maxsize=1)
def probe() -> XLAProbe:
    """Ask torch_xla once per process (its spawn later removes the variables that the count depends on)."""
    try:
        xr = xla("runtime")
    except Exception as error:  # ImportError, or whatever a mismatched torch_xla build raises on import
        return XLAProbe(import_error=f"{type(error).__name__}: {error}")
    try:
        device_type = str(xr.device_type())
        count = int(xla("_internal.tpu").num_available_devices()) if device_type == "TPU" else 0
    except Exception as error:  # the runtime raises ValueError / OSError / RuntimeError when misconfigured
        return XLAProbe(import_error=None, runtime_error=f"{type(error).__name__}: {error}")
    return XLAProbe(import_error=None, device_type=device_type, device_count=count)


def xla_unavailable_reason(facts: XLAProbe, torch_version: str) -> str | None:
    """Why no TPU can be used, or ``None`` when one can. A pure function of :func:`probe`'s facts."""
    if facts.import_error is not None:
        return (
            f"torch_xla is not importable: pip install torch_xla (the release matching torch {torch_version}); "
            f"importing it failed with {facts.import_error}"
        )
    if facts.runtime_error is not None:
        return f"torch_xla is installed but its PJRT runtime failed to start: {facts.runtime_error}"
    if facts.device_type != "TPU":
        return (
            f"torch_xla is installed but its PJRT runtime targets {facts.device_type!r}, not a TPU; on a TPU VM "
            f"set PJRT_DEVICE=TPU"
        )
    if facts.device_count < 1:
        return "torch_xla finds no TPU device on this machine"
    return None


def current_reason() -> str | None:
    return xla_unavailable_reason(probe(), _torch_release())


def parse_xla_devices(request: DeviceRequest, device_count: int) -> list[int]:
    """The TPU devices for ``request``: every device, exactly one, or one chosen index.

    torch_xla's PJRT runtime starts either one process or one per device of the host, so a count other
    than 1 or all cannot be honoured.
    """
    if device_count < 1:
        raise ConfigurationError(f"devices={request} cannot be met: torch_xla finds no TPU device here.")
    if request.auto or request.all_visible or request.count == device_count:
        return list(range(device_count))
    if request.count == 1:
        return [0]
    if request.indices is not None and len(request.indices) == 1 and request.indices[0] < device_count:
        return list(request.indices)
    raise ConfigurationError(
        f"devices={request} cannot be met on TPU: torch_xla runs either one process or one per device, and this "
        f"host has {device_count}. Pass devices=1, devices={device_count} (or -1), or one index such as [0]."
    )


def xla_device() -> torch.device:
    """This process's XLA device."""
    device_function = getattr(xla(), "device", None)  # torch_xla >= 2.7; xla_device() before
    if device_function is not None:
        return torch.device(device_function())
    return torch.device(xla("core.xla_model").xla_device())
