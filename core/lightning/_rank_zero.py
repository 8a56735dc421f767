"""``rank_zero_only`` and friends, as Lightning's ``lightning.pytorch.utilities`` provides them.

The global rank is read when the function is called: from the process group when one is initialised,
else from the variables every launcher core supports exports (``RANK``, ``SLURM_PROCID``,
``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``JSM_NAMESPACE_RANK``), else 0.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, Final, TypeVar

from core._errors import CoreWarning

_RANK_VARIABLES: Final = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "JSM_NAMESPACE_RANK")
_log = logging.getLogger("core")

T = TypeVar("T")


def global_rank() -> int:
    """This process's global rank (0 when it is not part of a distributed run)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    for variable in _RANK_VARIABLES:
        value = os.environ.get(variable)
        if value is not None and value.isdigit():
            return int(value)
    return 0


def rank_zero_only(function: Callable[..., T]) -> Callable[..., T | None]:
    """Decorate ``function`` so that it runs on global rank 0 only (``None`` elsewhere)."""

    @functools.wraps(function)
    def on_rank_zero(*args: Any, **kwargs: Any) -> T | None:
        return function(*args, **kwargs) if global_rank() == 0 else None

    return on_rank_zero


def rank_zero_info(message: str, *args: Any, **kwargs: Any) -> None:
    """Log ``message`` at INFO level on global rank 0 only."""
    if global_rank() == 0:
        _log.info(message, *args, **kwargs)


def rank_zero_warn(message: str, category: type[Warning] = CoreWarning, stacklevel: int = 2) -> None:
    """Warn with ``message`` on global rank 0 only."""
    if global_rank() == 0:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
