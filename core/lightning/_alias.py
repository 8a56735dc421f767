"""``import lightning`` answered by ``core.lightning``: the alias that runs an unmodified Lightning program on core.

:func:`install_alias` puts :class:`LightningAlias` first on ``sys.meta_path``, so ``lightning``, ``lightning_fabric``
and ``pytorch_lightning`` (and every submodule of each) are the module objects of ``core.lightning``,
``core.lightning.fabric`` and ``core.lightning.pytorch``: one module under two names, so ``isinstance`` and module
state agree whichever name a program imports. The ``core-lightning-alias`` distribution calls it from the three
top-level packages it installs, so a program, and every process it launches, gets the alias without an edit.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Final

ALIASES: Final = {
    "lightning": "core.lightning",
    "lightning_fabric": "core.lightning.fabric",
    "pytorch_lightning": "core.lightning.pytorch",
}
"""Lightning's three package names, and the module of core that answers each."""


def aliased(fullname: str) -> str | None:
    """The module of core that answers ``fullname`` (``lightning.fabric.x`` -> ``core.lightning.fabric.x``), or None."""
    for alias, target in ALIASES.items():
        if fullname == alias or fullname.startswith(alias + "."):
            return target + fullname[len(alias):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads ``lightning.x`` as the module object ``core.lightning.x`` itself."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.original_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.original_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.original_spec  # the import system set the alias's spec; keep the real one


class LightningAlias(importlib.abc.MetaPathFinder):
    """Finds ``lightning``, ``lightning_fabric``, ``pytorch_lightning`` and their submodules in ``core.lightning``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        real = aliased(fullname)
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=True)

    def __repr__(self) -> str:
        return "LightningAlias()"


def install_alias(importing: str | None = None) -> None:
    """Answer ``import lightning`` (and ``lightning_fabric``, ``pytorch_lightning``) with ``core.lightning``.

    The finder goes first on ``sys.meta_path``, so a real Lightning installed beside core is not used; names of
    the three packages already imported are dropped from ``sys.modules`` and import again through the alias.
    Calling it again does nothing.

    :param importing: the name of an alias package being imported now (the ``core-lightning-alias``
        distribution's ``lightning/__init__.py`` passes its ``__name__``): it is replaced in ``sys.modules`` by
        the module of core that answers it, so the import itself returns core's module.
    """
    for name in [name for name in sys.modules if aliased(name) is not None]:
        if sys.modules[name].__name__ != aliased(name):
            del sys.modules[name]
    if not any(isinstance(finder, LightningAlias) for finder in sys.meta_path):
        sys.meta_path.insert(0, LightningAlias())
    if importing is not None:
        target = aliased(importing)
        if target is None:
            raise ValueError(f"install_alias(importing={importing!r}): expected one of {sorted(ALIASES)}")
        sys.modules[importing] = importlib.import_module(target)
