"""The table behind ``core.lightning``: every Lightning name a namespace module answers, and how.

Each namespace module (``core.lightning``, ``core.lightning.pytorch.callbacks``, ...) holds a mapping from
Lightning's public name to either a :class:`Target` (the core or plugin object that plays its part) or an
:class:`Unsupported` (why there is none, and what to use instead). A module's ``__getattr__`` comes from
:func:`namespace_getattr`, so nothing is imported until a name is used: ``import core.lightning`` costs no
torch, and ``L.fabric.strategies.FSDPStrategy`` imports core-fsdp only when it is touched.

Names outside the table raise :class:`UnsupportedLightningName` (a :class:`core.CoreError`) saying what
exists, never a bare ``AttributeError``; private and dunder names keep Python's ``AttributeError`` so that
tools probing modules (``hasattr(module, "__wrapped__")``) behave.
"""

from __future__ import annotations

import difflib
import dis
import importlib
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from core._errors import CoreError
from core.lightning._entries import Entry, Target, Unsupported

__all__ = [
    "Entry",
    "Target",
    "UnknownLightningName",
    "Unsupported",
    "UnsupportedLightningName",
    "namespace_getattr",
    "resolve_name",
]


class UnsupportedLightningName(CoreError):
    """A Lightning name that ``core.lightning`` does not provide; the message says what to use instead."""


class UnknownLightningName(UnsupportedLightningName, AttributeError):
    """A name that is not Lightning's at all in that module (a typo, or another library's name).

    Also an ``AttributeError``, so that ``hasattr``/``getattr(module, name, default)`` in tools that probe modules
    (jsonargparse looks for the shortest import path of a class) get False/the default, as for any module. Under
    ``from module import name``, which would turn an AttributeError into a bare "cannot import name", the plain
    :class:`UnsupportedLightningName` is raised instead, with the same message.
    """




def resolve_name(namespace: str, name: str, table: Mapping[str, Entry]) -> Any:
    """The object for ``namespace.name``, importing its module; a clear error when there is none."""
    entry = table.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, sorted(table), n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownLightningName(
            f"{namespace}.{name} is not a Lightning name that core.lightning knows.{hint} "
            f"{namespace} provides: {', '.join(sorted(n for n, e in table.items() if isinstance(e, Target)))}. "
            "See docs/migrating-from-lightning.md."
        )
    if isinstance(entry, Unsupported):
        raise UnsupportedLightningName(
            f"{namespace}.{name} is not supported by core: {entry.why} Instead: {entry.instead} "
            "(docs/migrating-from-lightning.md)."
        )
    try:
        module = importlib.import_module(entry.module)
    except ImportError as error:
        raise UnsupportedLightningName(
            f"{namespace}.{name} is provided by {entry.distribution}, which is not installed "
            f"({type(error).__name__}: {error}): pip install {entry.distribution}"
        ) from error
    try:
        return getattr(module, entry.attribute)
    except AttributeError:
        raise UnsupportedLightningName(
            f"{namespace}.{name} should be {entry.module}.{entry.attribute}, which this version of "
            f"{entry.distribution} does not have: pip install --upgrade {entry.distribution}"
        ) from None


def _tree_name(namespace: str) -> str | None:
    """``pytorch.callbacks`` for ``core.lightning.pytorch.callbacks``; None outside Lightning's tree."""
    prefix = "core.lightning."
    return namespace[len(prefix):] if namespace.startswith(prefix) else None


def namespace_getattr(
    namespace: str, table: Mapping[str, Entry], submodules: tuple[str, ...] = ()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering ``table``'s names, and importing the listed ``submodules``.

    Under ``core.lightning.fabric`` and ``core.lightning.pytorch`` it also answers the names and submodules
    Lightning's module of that path has (core/lightning/_tree_map.py), and ``__path__``, so that
    ``import core.lightning.pytorch.callbacks.early_stopping`` reaches the finder of core/lightning/_finder.py.
    """
    tree = _tree_name(namespace)

    def _merged() -> tuple[dict[str, Entry], tuple[str, ...]]:
        if tree is None:
            return dict(table), submodules
        from core.lightning import _tree_map

        return {**_tree_map.table(tree), **table}, (*submodules, *_tree_map.children(tree))

    def __getattr__(name: str) -> Any:
        entries, children = _merged()
        if name == "__path__" and tree is not None:
            return []
        if name.startswith("_") and name not in entries:
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")
        if name in children:
            return importlib.import_module(f"{namespace}.{name}")
        entry = entries.get(name)
        if isinstance(entry, Target) and entry.module == namespace:  # the module's own file lacks the name
            raise UnsupportedLightningName(
                f"{namespace}.{name} is listed but not defined in {namespace}: pip install --upgrade core"
            )
        try:
            return resolve_name(namespace, name, entries)
        except UnknownLightningName as error:
            if _in_from_import(sys._getframe(1)):
                # `from X import Typo` turns an AttributeError into a bare "cannot import name": keep the advice.
                raise UnsupportedLightningName(str(error)) from None
            raise

    return __getattr__


def _in_from_import(frame: FrameType) -> bool:
    """Whether ``frame`` is executing ``from module import name`` (its current instruction is IMPORT_FROM)."""
    try:
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] == "IMPORT_FROM"
    except (IndexError, AttributeError):  # pragma: no cover - an interpreter without this frame layout
        return False
