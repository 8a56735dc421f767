"""The plugin toolkit: public helpers for plugin authors (launchers, environments, strategies, checkpoint_io)."""

from __future__ import annotations
