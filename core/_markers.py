"""The pluggy markers of the ``core`` project. Plugin authors import ``hookimpl`` from ``core``."""

from __future__ import annotations

from typing import Final

import pluggy

PROJECT_NAME: Final = "core"

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``core`` project, blind to private attributes.

    pluggy takes any attribute carrying the ``core`` marker for a hook implementation, under the attribute's name.
    A plugin that keeps another plugin's hook function in a private attribute (``self._precision_backward =
    active.bind("precision_backward")``, a fast path that skips pluggy's dispatch) would then look like it
    implements a hook named ``_precision_backward`` when registered for its next run. Hook names never start with
    an underscore, so such attributes are not looked at.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        if name.startswith("_"):
            return None
        return super().parse_hookimpl_opts(plugin, name)
