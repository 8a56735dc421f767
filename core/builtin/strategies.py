"""The built-in ``single_device`` strategy: the entry point names the toolkit's class itself.

The class lives in :mod:`core.toolkit.strategies` (the toolkit owns its code; ``core.builtin`` imports it,
never the reverse); this module is what the ``single_device`` entry point of the ``core.strategies`` group
names, so that the built-ins are registered like any other plugin.
"""

from __future__ import annotations

from core.toolkit.strategies import SingleDeviceStrategy

__all__ = ["SingleDeviceStrategy"]
