"""core-mps: the ``mps`` accelerator of ``core`` (Apple silicon)."""

from __future__ import annotations

from ._accelerator import MPS_SUPPORTS, MPSAccelerator, mps_unavailable_reason, parse_mps_devices

__all__ = ["MPS_SUPPORTS", "MPSAccelerator", "mps_unavailable_reason", "parse_mps_devices"]
