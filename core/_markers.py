"""The pluggy markers of the ``core`` project. Plugin authors import ``hookimpl`` from ``core``."""

from __future__ import annotations

import weakref
from types import MemberDescriptorType, ModuleType
from typing import Final

import pluggy

PROJECT_NAME: Final = "core"

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``core`` project, blind to a plugin object's private instance attributes.

    pluggy takes any attribute carrying the ``core`` marker for a hook implementation, under the attribute's name.
    A plugin that keeps another plugin's hook function in a private attribute (``self._precision_backward =
    active.bind("precision_backward")``, a fast path that skips pluggy's dispatch) would then look like it
    implements a hook named ``_precision_backward`` when registered for its next run. So an instance attribute
    whose name starts with an underscore is not looked at; methods are, whatever their name (``@hookimpl(specname=
    "strategy_launch") def _launch`` keeps working).

    It also remembers what it found on a class: pluggy looks at every name of ``dir(plugin)`` with
    ``inspect.getattr_static`` at each registration, and a run registers a new object of the same few classes
    (``core.resolve`` spent 20 of its 27 ms there, most of it asking each environment whether it claims the
    process). A name found on the class (not on the object) gives the same answer for every object of that class,
    so it is looked up once per class; a name on the object itself is looked at every time.
    """

    _by_class: Final[weakref.WeakKeyDictionary[type, dict[str, tuple[object, pluggy.HookimplOpts | None]]]] = (
        weakref.WeakKeyDictionary()
    )
    _specs: Final[dict[tuple[str, str], tuple[object, pluggy.HookspecOpts | None]]] = {}

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        if isinstance(plugin, (type, ModuleType)):  # a class's or module's __dict__ holds its functions
            return super().parse_hookimpl_opts(plugin, name)
        if name in getattr(plugin, "__dict__", ()):  # set on this object: private ones are skipped (see above)
            return None if name.startswith("_") else super().parse_hookimpl_opts(plugin, name)
        value = _class_attribute(type(plugin), name)
        if isinstance(value, MemberDescriptorType):  # a slot's value belongs to the object: asked for each one
            return super().parse_hookimpl_opts(plugin, name)
        found = self._by_class.setdefault(type(plugin), {})
        cached = found.get(name)
        if cached is None or cached[0] is not value:  # first seen, or the class attribute was replaced since
            cached = found[name] = (value, super().parse_hookimpl_opts(plugin, name))
        opts = cached[1]
        return None if opts is None else pluggy.HookimplOpts(**opts)  # pluggy normalizes the dict it gets in place

    def parse_hookspec_opts(self, module_or_class: ModuleType | type, name: str) -> pluggy.HookspecOpts | None:
        if not isinstance(module_or_class, ModuleType):
            return super().parse_hookspec_opts(module_or_class, name)
        # A module's specs (core.hookspecs, for every manager) are read once per function object.
        key, value = (module_or_class.__name__, name), vars(module_or_class).get(name)
        cached = self._specs.get(key)
        if cached is None or cached[0] is not value:
            cached = self._specs[key] = (value, super().parse_hookspec_opts(module_or_class, name))
        return cached[1]


def _class_attribute(cls: type, name: str) -> object:
    """What ``name`` is on ``cls`` or its bases, unevaluated (a few dict lookups; ``None`` where it is absent)."""
    return next((vars(klass)[name] for klass in cls.__mro__ if name in vars(klass)), None)
