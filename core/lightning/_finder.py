"""``import core.lightning.<any Lightning 2.6 module path>``: a meta path finder over Lightning's module tree.

Lightning's tree (``_tree.py``) has some 250 public modules; core has a file for only a few of them
(``core.lightning.pytorch.callbacks``, ``.demos``, ``.cli``, ...). For every other path this finder makes a
module whose ``__getattr__`` answers the names Lightning's module of that path offers (``_tree_map.py``). A
module with nothing to offer refuses the import itself with :class:`UnsupportedLightningName`, as does a path
Lightning does not have: never a bare ``ModuleNotFoundError``. The finder sits last on ``sys.meta_path`` and
answers only names under ``core.lightning.fabric`` and ``core.lightning.pytorch``.
"""

from __future__ import annotations

import difflib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

from core.lightning import _tree_map
from core.lightning._names import Target, UnsupportedLightningName, namespace_getattr
from core.lightning._tree import LIGHTNING_REF, MODULES

_ROOTS = ("core.lightning.fabric.", "core.lightning.pytorch.")


def lightning_path(fullname: str) -> str:
    """``lightning.pytorch.x`` for ``core.lightning.pytorch.x``."""
    return "lightning." + fullname[len("core.lightning."):]


class _TreeLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        fullname = module.__name__
        tree = fullname[len("core.lightning."):]
        refused = _tree_map.refusal(tree)
        if refused is not None:
            raise UnsupportedLightningName(
                f"import {fullname} ({lightning_path(fullname)}) is not supported by core: {refused.why} "
                f"Instead: {refused.instead} (docs/migrating-from-lightning.md, 'Module paths')."
            )
        table = _tree_map.table(tree)
        module.__doc__ = f"``{lightning_path(fullname)}`` answered by core: see core/lightning/_tree_map.py."
        module.__getattr__ = namespace_getattr(fullname, {})  # type: ignore[method-assign]
        module.__all__ = sorted(name for name, entry in table.items()  # type: ignore[attr-defined]
                                if isinstance(entry, Target) and not name.startswith("_"))
        module.__dir__ = lambda: sorted({*vars(module), *table, *_tree_map.children(tree)})  # type: ignore[method-assign]


class LightningTreeFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of Lightning's tree that core has no file for (see the module docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_ROOTS):
            return None
        tree = fullname[len("core.lightning."):]
        parent, _, last = tree.rpartition(".")
        if tree not in MODULES and parent in MODULES and last in _tree_map.table(parent):
            # A name of the module, not a submodule: `pkgutil.resolve_name` and `mock.patch` try importing
            # "...loggers.TensorBoardLogger" before getattr, and expect the ImportError a real package gives.
            return None
        if tree not in MODULES and parent in MODULES:
            # `from core.lightning.pytorch.callbacks import EarlyStoping` tries the submodule after the name.
            known = [*_tree_map.table(parent), *_tree_map.children(parent)]
            close = difflib.get_close_matches(last, known, n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UnsupportedLightningName(
                f"{last!r} is not a Lightning name or module in {lightning_path(f'core.lightning.{parent}')} "
                f"(Lightning {LIGHTNING_REF}), so core.lightning.{parent} has none.{hint} "
                "See docs/migrating-from-lightning.md."
            )
        if tree not in MODULES:
            close = difflib.get_close_matches(tree, list(MODULES), n=3, cutoff=0.7)
            hint = f" Did you mean {' or '.join('core.lightning.' + c for c in close)}?" if close else ""
            raise UnsupportedLightningName(
                f"import {fullname}: {lightning_path(fullname)} is not a module of Lightning {LIGHTNING_REF}'s "
                f"public tree, which core.lightning follows.{hint} See docs/migrating-from-lightning.md."
            )
        return importlib.util.spec_from_loader(fullname, _TreeLoader(), is_package=True)

    def __repr__(self) -> str:
        return "LightningTreeFinder()"


def install() -> None:
    """Append the finder to ``sys.meta_path`` once (the path finder goes first, so real files win)."""
    if not any(isinstance(finder, LightningTreeFinder) for finder in sys.meta_path):
        sys.meta_path.append(LightningTreeFinder())


