"""Importing Ray, or saying exactly why it cannot be imported and how to fix that."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Final

from packaging.version import InvalidVersion, Version

from core import PluginUnavailableError

INSTALL: Final = "pip install 'ray>=2.9'"
"""The command that installs the engine (``pip install core-ray`` installs it as a dependency)."""

OLDEST: Final = Version("2.9")
"""The oldest Ray this plugin was written for (placement groups and ``ray.util.get_node_ip_address``)."""


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why Ray cannot be used here, or None when it can."""
    try:
        ray = importlib.import_module("ray")
    except ImportError as error:
        return f"Ray is not importable ({type(error).__name__}: {error}); install it: {INSTALL}"
    found = str(getattr(ray, "__version__", "0"))
    try:
        too_old = Version(found) < OLDEST
    except InvalidVersion:
        too_old = False  # a development build: let it try
    if too_old:
        return f"Ray {found} is older than {OLDEST}, which core-ray needs; upgrade it: {INSTALL}"
    return None


def load() -> ModuleType:
    """The ``ray`` module; raises :class:`core.PluginUnavailableError` naming the fix when it is unusable."""
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailableError(f"plugins=['ray'] cannot run: {reason}")
    return importlib.import_module("ray")
