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
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from core._errors import CoreError

__all__ = ["Target", "Unsupported", "UnsupportedLightningName", "namespace_getattr", "resolve_name"]


class UnsupportedLightningName(CoreError):
    """A Lightning name that ``core.lightning`` does not provide; the message says what to use instead."""


@attrs.frozen
class Target:
    """Where the object for a Lightning name lives: ``module`` and ``attribute``.

    :param distribution: The distribution to ``pip install`` when ``module`` is a plugin's package.
    """

    module: str
    attribute: str
    distribution: str = "core"


@attrs.frozen
class Unsupported:
    """A Lightning name with no counterpart here: ``why`` there is none and ``instead``, what to do."""

    why: str
    instead: str


Entry = Target | Unsupported


def resolve_name(namespace: str, name: str, table: Mapping[str, Entry]) -> Any:
    """The object for ``namespace.name``, importing its module; a clear error when there is none."""
    entry = table.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, sorted(table), n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnsupportedLightningName(
            f"{namespace}.{name} is not a Lightning name that core.lightning knows.{hint} "
            f"{namespace} provides: {', '.join(sorted(n for n, e in table.items() if isinstance(e, Target)))}. "
            "See docs/migrating-from-lightning.md."
        )
    if isinstance(entry, Unsupported):
        raise UnsupportedLightningName(
            f"{namespace}.{name} is not supported by core: {entry.why} Instead: {entry.instead} "
            "(docs/migrating-from-lightning.md lists every name)."
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


def namespace_getattr(
    namespace: str, table: Mapping[str, Entry], submodules: tuple[str, ...] = ()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering ``table``'s names, and importing the listed ``submodules``."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")
        if name in submodules:
            return importlib.import_module(f"{namespace}.{name}")
        return resolve_name(namespace, name, table)

    return __getattr__
