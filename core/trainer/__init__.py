"""The ``Trainer``: fit / validate / test / predict loops for a :class:`core.Module`, on top of ``Lite``."""

from __future__ import annotations

from core.trainer._trainer import Trainer

__all__ = ["Trainer"]
