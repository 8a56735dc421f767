"""Horovod's PyTorch binding, imported only when a run needs it (:class:`core.toolkit.OptionalEngine`)."""

from __future__ import annotations

from types import ModuleType
from typing import Final

from core.toolkit import OptionalEngine

INSTALL: Final = "python -m core_horovod.install"
"""The command that builds Horovod 0.28.1 with PyTorch and Gloo support and installs it (cached)."""


def _gloo_missing(hvd: ModuleType) -> str | None:
    if hvd.gloo_built():
        return None
    return f"this Horovod was built without Gloo, which core-horovod needs on CPUs; rebuild it: {INSTALL}"


HOROVOD: Final = OptionalEngine("horovod.torch", title="Horovod with PyTorch support", install=INSTALL,
                                used_by="strategy='horovod'", plugin="core-horovod", check=_gloo_missing)

unavailable_reason = HOROVOD.unavailable_reason
load = HOROVOD.load
