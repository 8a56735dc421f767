"""Strategy classes for plugin authors: the single-process reference and what process-group strategies build on.

:class:`SingleDeviceStrategy` is the ``single_device`` strategy: one process, one device. Its collective and
checkpoint hooks are the single-process reference that every other strategy class here extends;
:func:`check_reduce_op` validates a ``reduce_op`` against :data:`REDUCE_OPS`.
"""

from __future__ import annotations

from core.toolkit.strategies._single import REDUCE_OPS, SingleDeviceStrategy, check_reduce_op

__all__ = [
    "REDUCE_OPS",
    "SingleDeviceStrategy",
    "check_reduce_op",
]
