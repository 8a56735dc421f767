"""Which CUDA devices a run may use: pure functions of what the hardware query reports.

Indices are those torch uses, counted within ``CUDA_VISIBLE_DEVICES``: with
``CUDA_VISIBLE_DEVICES=2,3``, ``devices=[0]`` is the physical GPU 2. Nothing here touches the driver,
so every rule is testable on a machine without a GPU.
"""

from __future__ import annotations

from core import ConfigurationError, DeviceRequest

_INSTALL_CUDA_TORCH = "install a CUDA build of torch (https://pytorch.org/get-started/locally/)"


def visible_entries(visible_devices: str | None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES``, or ``None`` when it is not set (every GPU visible)."""
    if visible_devices is None:
        return None
    entries: list[str] = []
    for raw in visible_devices.split(","):
        entry = raw.strip()
        # The CUDA runtime stops at the first invalid (negative or empty) entry.
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return entries


def cuda_unavailable_reason(
    *, built: bool, device_count: int, visible_devices: str | None, torch_version: str
) -> str | None:
    """Why no CUDA device can be used, or ``None`` when at least one can."""
    if not built:
        return f"this torch build ({torch_version}) has no CUDA support; {_INSTALL_CUDA_TORCH}"
    if device_count > 0:
        return None
    if visible_entries(visible_devices) == []:
        return f"CUDA_VISIBLE_DEVICES={visible_devices!r} hides every GPU; unset it or list the GPUs to use"
    return "torch finds no CUDA device (no NVIDIA GPU here, or its driver is not loaded: check nvidia-smi)"


def describe_visible(visible_count: int, visible_devices: str | None) -> str:
    """``"2 CUDA device(s) are visible (CUDA_VISIBLE_DEVICES='4,5', so index 0 is GPU 4)"``."""
    entries = visible_entries(visible_devices)
    if entries is None:
        where = "CUDA_VISIBLE_DEVICES is not set"
    elif entries:
        where = f"CUDA_VISIBLE_DEVICES={visible_devices!r}, so index 0 is GPU {entries[0]}"
    else:
        where = f"CUDA_VISIBLE_DEVICES={visible_devices!r}"
    return f"{visible_count} CUDA device(s) are visible ({where})"


def parse_cuda_devices(request: DeviceRequest, visible_count: int, visible_devices: str | None) -> list[int]:
    """The device indices for ``request`` given ``visible_count`` devices, or a :class:`ConfigurationError`.

    ``auto`` and ``-1`` take every visible device (as Lightning does), a count takes the first ones, and
    explicit indices must each name a visible device.
    """
    visible = describe_visible(visible_count, visible_devices)
    if visible_count < 1:
        raise ConfigurationError(f"devices={request} cannot be met: {visible}.")
    if request.auto or request.all_visible:
        return list(range(visible_count))
    if request.count is not None:
        if request.count > visible_count:
            raise ConfigurationError(
                f"devices={request.count} asks for {request.count} CUDA devices, but {visible}. "
                f"Pass devices={visible_count} or fewer, or devices=-1 for all of them."
            )
        return list(range(request.count))
    indices = list(request.indices or ())
    outside = [index for index in indices if index >= visible_count]
    if outside:
        raise ConfigurationError(
            f"devices={indices} names CUDA indices {outside} that do not exist: {visible}; valid indices are "
            f"0..{visible_count - 1}, counted within CUDA_VISIBLE_DEVICES."
        )
    return indices
