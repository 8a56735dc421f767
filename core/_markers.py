"""The pluggy markers of the ``core`` project. Plugin authors import ``hookimpl`` from ``core``."""

from __future__ import annotations

from types import ModuleType
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
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        instance = not isinstance(plugin, (type, ModuleType))  # a class's or module's __dict__ holds its functions
        if instance and name.startswith("_") and name in getattr(plugin, "__dict__", ()):
            return None
        return super().parse_hookimpl_opts(plugin, name)
