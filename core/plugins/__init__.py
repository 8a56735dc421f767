"""``python -m core.plugins``: list, inspect and check the installed plugins."""

from core.plugins._cli import main

__all__ = ["main"]
