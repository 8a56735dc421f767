"""``Checkpoint``: the base class of callbacks that save checkpoints (Lightning's name)."""

from __future__ import annotations

from core.callbacks._callback import Callback

__all__ = ["Checkpoint"]


class Checkpoint(Callback):
    """A callback that saves checkpoints: :class:`~core.callbacks.ModelCheckpoint` is one. ``isinstance(callback,
    Checkpoint)`` finds them all, as in Lightning; subclass it for your own checkpointing callback."""
