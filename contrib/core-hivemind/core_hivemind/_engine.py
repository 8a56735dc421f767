"""Importing hivemind, or saying exactly why it cannot be imported and how to fix that."""

from __future__ import annotations

import functools
import importlib
import sys
from types import ModuleType
from typing import Final

from core import PluginUnavailableError

INSTALL: Final = "pip install 'hivemind>=1.1.12'"
"""The command that installs hivemind (its Linux wheel bundles the p2pd daemon)."""


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why ``hivemind`` cannot be used here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"hivemind's wheel ships its p2pd daemon for Linux only, and this is {sys.platform!r}"
    try:
        importlib.import_module("hivemind")
    except ImportError as error:
        problem = f"{type(error).__name__}: {error}"
        return f"hivemind is not importable ({problem}); install it: {INSTALL}"
    return None


def load() -> ModuleType:
    """The ``hivemind`` module; raises :class:`core.PluginUnavailableError` naming the fix."""
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailableError(f"strategy='hivemind' cannot run: {reason}")
    return importlib.import_module("hivemind")
