"""Plugin traits: the attributes a plugin object declares besides its hooks, read in one place.

A plugin declares traits as plain attributes (``priority: Final = 20``, ``supports = Supports(...)``). The
resolver, the CLI, the conformance kit and ``core.run`` never read those attributes themselves: they call
:func:`traits_of`, which reads them once, checks every value's type and refuses near-misses
(``priorty = 5``) with a :class:`core.BrokenPluginError` naming the plugin, the attribute and the valid
names. A misspelt trait is never silently replaced by its default.

:data:`TRAITS` is the single table of trait names, the kinds each applies to, and what each means;
``core/hookspecs.py`` documents the same table for plugin authors, and a test keeps the two equal.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from core._checks import is_whole
from core._errors import BrokenPluginError
from core._records import KINDS, SUPPORTS_ANYTHING, Supports

__all__ = ["RUNTIME_ATTRIBUTES", "TRAITS", "PluginObject", "PluginTraits", "Trait", "traits_of"]

ALL_KINDS: Final = frozenset(KINDS)
AUTO_STRATEGY_KEYS: Final = ("single", "multi", "interactive")


@attrs.frozen
class Trait:
    """One trait: its attribute name, the kinds it has a meaning for, the expected value, and its meaning."""

    name: str
    kinds: frozenset[str]
    expected: str
    meaning: str


TRAITS: Final[Mapping[str, Trait]] = {
    trait.name: trait
    for trait in (
        Trait("kind", ALL_KINDS, f"one of {list(KINDS)}", "The kind of plugin; required for objects passed in code."),
        Trait(
            "name", ALL_KINDS, "a non-empty str",
            "Canonical alias, used in messages and compatibility rules (``'cuda'`` for the ``gpu`` alias too).",
        ),
        Trait(
            "supports", ALL_KINDS, "a core.Supports record",
            "Which aliases of the other kinds it works with; the resolver checks every pair of the active set.",
        ),
        Trait(
            "contract_version", ALL_KINDS, "an int >= 1",
            "The hook contract version it was written for; ``--check`` reports one newer than the core's.",
        ),
        Trait(
            "unavailable_reason", ALL_KINDS, "None, a str, or a method returning str | None",
            "Why it cannot run on this machine (None when it can); shown by ``--check`` and in errors.",
        ),
        Trait(
            "limitation", ALL_KINDS, "None, a str, or a method returning str | None",
            "What it lacks on this machine although it runs (float8 emulated where no GPU computes it); shown by "
            "``--check`` beside 'usable'.",
        ),
        Trait(
            "priority", frozenset({"accelerator", "environment"}), "an int",
            "The order in which ``auto`` asks candidates, highest first.",
        ),
        Trait(
            "auto_strategies", frozenset({"accelerator"}),
            f"a mapping with keys among {list(AUTO_STRATEGY_KEYS)} and str values",
            "The strategies ``strategy='auto'`` picks on this accelerator for one process, several processes, "
            "and an interactive session (defaults ``single_device``, ``ddp``, ``ddp_notebook``).",
        ),
        Trait(
            "max_processes", frozenset({"strategy"}), "None or an int >= 1",
            "The most processes it can run (``1`` for ``single_device``; ``None`` for no limit).",
        ),
        Trait(
            "default_checkpoint_io", frozenset({"strategy"}), "a str (a checkpoint_io alias)",
            "The checkpoint_io used when the user names none (``'torch'`` otherwise).",
        ),
        Trait(
            "process_per_device", frozenset({"strategy"}), "a bool",
            "Whether it runs one process per device (``False`` for ``dp``, which drives all devices from one).",
        ),
        Trait(
            "writes_shards", frozenset({"checkpoint_io"}), "a bool",
            "Whether every rank may save its shards of one state (``distributed``); sharded checkpoints need it.",
        ),
    )
}
"""Every trait a plugin may declare, by attribute name."""

RUNTIME_ATTRIBUTES: Final[Mapping[str, str]] = {
    "pending": "Checkpoint_io with background writes: how many writes are in flight now (read during a run).",
}
"""Attributes read while a run goes on, not at registration; their names are reserved like traits."""

_RESERVED: Final = frozenset(TRAITS) | frozenset(RUNTIME_ATTRIBUTES)


@runtime_checkable
class PluginObject(Protocol):
    """What every plugin object is: it names its kind. Every other trait in :data:`TRAITS` is optional."""

    kind: str


def _default_supports() -> Supports:
    return SUPPORTS_ANYTHING


@attrs.frozen
class PluginTraits:
    """The validated traits of one plugin object; an attribute it does not declare has the default here."""

    kind: str
    name: str
    supports: Supports = attrs.field(factory=_default_supports)
    contract_version: int | None = None
    unavailable_reason: str | Callable[[], str | None] | None = None
    limitation: str | Callable[[], str | None] | None = None
    priority: int = 0
    auto_strategies: Mapping[str, str] = attrs.field(factory=dict)
    max_processes: int | None = None
    default_checkpoint_io: str = "torch"
    process_per_device: bool = True
    writes_shards: bool = False

    def reason_unavailable(self) -> str | None:
        """The plugin's ``unavailable_reason``, called if it is a method."""
        reason = self.unavailable_reason
        return reason() if callable(reason) else reason

    def limitation_here(self) -> str | None:
        """The plugin's ``limitation``, called if it is a method."""
        limitation = self.limitation
        return limitation() if callable(limitation) else limitation


_CHECKS: Final[Mapping[str, Callable[[Any], bool]]] = {
    "kind": lambda value: value in KINDS,
    "name": lambda value: isinstance(value, str) and bool(value),
    "supports": lambda value: isinstance(value, Supports),
    "contract_version": lambda value: is_whole(value, 1),
    "unavailable_reason": lambda value: value is None or isinstance(value, str) or callable(value),
    "limitation": lambda value: value is None or isinstance(value, str) or callable(value),
    "priority": is_whole,
    "auto_strategies": lambda value: isinstance(value, Mapping)
    and all(key in AUTO_STRATEGY_KEYS and isinstance(alias, str) for key, alias in value.items()),
    "max_processes": lambda value: value is None or is_whole(value, 1),
    "default_checkpoint_io": lambda value: isinstance(value, str) and bool(value),
    "process_per_device": lambda value: isinstance(value, bool),
    "writes_shards": lambda value: isinstance(value, bool),
}


def _describe(plugin: object, kind: str, alias: str | None) -> str:
    where = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    return f"The {kind} plugin {alias!r} ({where})" if alias else f"The {kind} plugin {where}"


_CLASS_ATTRIBUTES: dict[type, frozenset[str]] = {}


def _class_attributes(cls: type) -> frozenset[str]:
    names = _CLASS_ATTRIBUTES.get(cls)
    if names is None:
        names = _CLASS_ATTRIBUTES[cls] = frozenset(name for name in dir(cls) if not name.startswith("_"))
    return names


def _declared_names(plugin: object) -> set[str]:
    names = set(_class_attributes(type(plugin)))
    instance_attributes = getattr(plugin, "__dict__", None)
    if isinstance(instance_attributes, dict):
        names.update(name for name in instance_attributes if not name.startswith("_"))
    return names


@functools.lru_cache(maxsize=4096)
def _near_miss(name: str) -> str | None:
    """The trait that ``name`` looks like a misspelling of, or None (``priorty`` -> ``priority``)."""
    if name in _RESERVED:
        return None
    close = difflib.get_close_matches(name.lower(), sorted(_RESERVED), n=1, cutoff=0.8)
    return close[0] if close else None


@functools.lru_cache(maxsize=1)
def _hook_names() -> frozenset[str]:
    from core import hookspecs

    return frozenset(name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction))


def traits_of(plugin: object, kind: str | None = None, alias: str | None = None) -> PluginTraits:
    """Read and validate the traits of ``plugin``; raise :class:`core.BrokenPluginError` on any problem.

    :param plugin: The plugin object (what an entry point's factory returned, or an object passed in code).
    :param kind: The kind it is registered as; ``None`` to take its declared ``kind``.
    :param alias: The alias it was selected by, for messages; defaults to its ``name`` or class name.
    :return: The traits, with defaults for what it does not declare.
    """
    declared_kind = getattr(plugin, "kind", None)
    kind = kind if kind is not None else declared_kind
    if kind not in KINDS:
        raise BrokenPluginError(
            f"{_describe(plugin, 'unknown', alias)} declares kind = {declared_kind!r}; expected one of {list(KINDS)}."
        )
    where = _describe(plugin, str(kind), alias)
    names = _declared_names(plugin)
    hooks = _hook_names()
    problems = []
    for name in sorted(names - _RESERVED - hooks):
        meant = _near_miss(name)
        if meant is not None:
            problems.append(f"declares {name!r}, which is not a trait: did you mean {meant!r}?")
    values: dict[str, Any] = {}
    for name in sorted(names & frozenset(TRAITS)):
        trait = TRAITS[name]
        value = getattr(plugin, name)
        if kind not in trait.kinds:
            problems.append(
                f"declares {name!r}, a trait of {sorted(trait.kinds)} plugins that has no meaning for a {kind}"
            )
        elif not _CHECKS[name](value):
            problems.append(f"declares {name} = {value!r}; expected {trait.expected}")
        else:
            values[name] = value
    if declared_kind is not None and declared_kind != kind and "kind" in values:
        problems.append(f"declares kind = {declared_kind!r} but is registered as a {kind}")
    if problems:
        raise BrokenPluginError(
            f"{where} " + "; ".join(problems) + f". Valid trait names for a {kind}: "
            f"{sorted(name for name, trait in TRAITS.items() if kind in trait.kinds)}. See core/hookspecs.py."
        )
    values["kind"] = kind
    values.setdefault("name", alias or type(plugin).__name__)
    return PluginTraits(**values)
