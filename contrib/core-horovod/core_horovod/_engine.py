"""Importing Horovod's PyTorch binding, or saying exactly why it cannot be imported and how to fix that."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Final

from core import PluginUnavailableError

INSTALL: Final = "python -m core_horovod.install"
"""The command that builds Horovod 0.28.1 with PyTorch and Gloo support and installs it (cached)."""


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why ``horovod.torch`` cannot be used here, or None when it can."""
    try:
        hvd = importlib.import_module("horovod.torch")  # untyped: imported by name
    except ImportError as error:
        problem = f"{type(error).__name__}: {error}"
        return f"Horovod with PyTorch support is not importable ({problem}); install it: {INSTALL}"
    if not hvd.gloo_built():
        return f"this Horovod was built without Gloo, which core-horovod needs on CPUs; rebuild it: {INSTALL}"
    return None


def load() -> ModuleType:
    """``horovod.torch``, initialised lazily by the caller; raises :class:`core.PluginUnavailableError`."""
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailableError(f"strategy='horovod' cannot run: {reason}")
    return importlib.import_module("horovod.torch")
