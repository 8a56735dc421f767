"""Importing torchft, or saying exactly why it cannot be imported and how to fix that."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Final

from core import PluginUnavailableError

INSTALL: Final = "pip install 'torchft>=0.2'"
"""The command that installs the engine (``pip install core-torchft`` installs it as a dependency)."""


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why torchft cannot be used here, or None when it can."""
    try:
        torchft = importlib.import_module("torchft")
    except ImportError as error:
        return f"torchft is not importable ({type(error).__name__}: {error}); install it: {INSTALL}"
    missing = [name for name in ("Manager", "DistributedDataParallel", "Optimizer", "ProcessGroupGloo")
               if not hasattr(torchft, name)]
    if missing:
        return f"this torchft lacks {missing}, which core-torchft needs; upgrade it: {INSTALL}"
    return None


def load() -> ModuleType:
    """The ``torchft`` module; raises :class:`core.PluginUnavailableError` naming the fix when it is unusable."""
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailableError(f"strategy='torchft_ddp' cannot run: {reason}")
    return importlib.import_module("torchft")


def submodule(name: str) -> ModuleType:
    """``torchft.<name>`` (torchft ships no type information, so it is imported by name, untyped)."""
    load()
    return importlib.import_module(f"torchft.{name}")
