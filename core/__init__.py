"""core: a PyTorch training toolkit whose hardware, strategies and formats are pluggy plugins.

Only re-exports live here. Names that need torch (``Lite``, ``Trainer``, ``Module``, ...) load on first
use, so ``import core`` and ``python -m core.plugins`` never pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from core._errors import (
    BrokenPluginError,
    CheckpointError,
    ConfigurationError,
    CoreDeprecationWarning,
    CoreError,
    CoreWarning,
    IncompatiblePluginError,
    PluginConflictError,
    PluginDisabledError,
    PluginUnavailableError,
    UnknownPluginError,
)
from core._markers import hookimpl, hookspec
from core._records import ClusterInfo, ResolvedConfig, Supports
from core._traits import TRAITS, PluginObject, PluginTraits, traits_of
from core._version import __version__

# Public name -> module that defines it, imported on first attribute access.
_LAZY = {
    "ActiveSet": "core.registry",
    "Catalog": "core.registry",
    "DeviceRequest": "core.registry",
    "PluginInfo": "core.registry",
    "detect_environment": "core.registry",
    "discover": "core.registry",
    "parse_devices": "core.registry",
    "resolve": "core.registry",
    "Lite": "core.lite",
    "seed_everything": "core.lite",
    "Trainer": "core.trainer",
    "Module": "core.module",
    "DataModule": "core.module",
    "Callback": "core.callbacks",
}

if TYPE_CHECKING:
    from core.callbacks import Callback
    from core.lite import Lite, seed_everything
    from core.module import DataModule, Module
    from core.registry import (
        ActiveSet,
        Catalog,
        DeviceRequest,
        PluginInfo,
        detect_environment,
        discover,
        parse_devices,
        resolve,
    )
    from core.trainer import Trainer


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "TRAITS",
    "ActiveSet",
    "BrokenPluginError",
    "Callback",
    "Catalog",
    "CheckpointError",
    "ClusterInfo",
    "ConfigurationError",
    "CoreDeprecationWarning",
    "CoreError",
    "CoreWarning",
    "DataModule",
    "DeviceRequest",
    "IncompatiblePluginError",
    "Lite",
    "Module",
    "PluginConflictError",
    "PluginDisabledError",
    "PluginInfo",
    "PluginObject",
    "PluginTraits",
    "PluginUnavailableError",
    "ResolvedConfig",
    "Supports",
    "Trainer",
    "UnknownPluginError",
    "__version__",
    "detect_environment",
    "discover",
    "hookimpl",
    "hookspec",
    "parse_devices",
    "resolve",
    "seed_everything",
    "traits_of",
]
