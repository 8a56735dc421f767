"""``lightning.pytorch.utilities``, answered by core: see core/lightning/_tables.py for every name."""

from __future__ import annotations

from core.lightning._names import namespace_getattr
from core.lightning._tables import UTILITIES

__getattr__ = namespace_getattr(__name__, UTILITIES)
