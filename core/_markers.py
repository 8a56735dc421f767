"""The pluggy markers of the ``core`` project. Plugin authors import ``hookimpl`` from ``core``."""

from __future__ import annotations

from typing import Final

import pluggy

PROJECT_NAME: Final = "core"

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)
