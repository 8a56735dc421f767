"""``lightning.fabric``: ``Fabric`` is :class:`core.Lite`; strategies and environments come from plugins."""

from __future__ import annotations

from typing import Any, Final

from core import __version__ as __version__  # Lightning's __version__: the version of core answering it
from core.lightning._names import Target, namespace_getattr

FABRIC: Final = {
    "Fabric": Target("core.lite", "Lite"),
    "seed_everything": Target("core.lightning._compat", "seed_everything"),
}

__getattr__ = namespace_getattr(
    __name__, FABRIC, submodules=("accelerators", "loggers", "plugins", "strategies", "utilities")
)


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` is a module, optimizer or data loader that ``Lite.setup*`` returned (Fabric's name)."""
    from core.lite import LiteDataLoader, LiteModule, LiteOptimizer

    return isinstance(obj, (LiteModule, LiteOptimizer, LiteDataLoader))


def __dir__() -> list[Any]:
    return sorted([*globals(), *FABRIC])
