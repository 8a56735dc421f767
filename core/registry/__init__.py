"""The registry: installed plugins from entry-point metadata, and the resolver that picks the active set.

This package never imports torch or plugin code at import time: listing plugins (``python -m core.plugins``)
reads metadata only, and :func:`resolve` imports just the plugins a run selects.
"""

from __future__ import annotations

from core.registry._active import ActiveSet
from core.registry._devices import DeviceRequest, parse_devices
from core.registry._discovery import Catalog, PluginInfo, discover
from core.registry._resolver import detect_environment, is_interactive, resolve

__all__ = [
    "ActiveSet",
    "Catalog",
    "DeviceRequest",
    "PluginInfo",
    "detect_environment",
    "discover",
    "is_interactive",
    "parse_devices",
    "resolve",
]
