"""core-ddp: the DDP family of strategies for ``core`` (``ddp``, ``ddp_spawn``, ``ddp_fork``, ``ddp_notebook``,
``ddp_find_unused_parameters_true``, ``dp``, and Lightning 1.x's ``ddp_cpu``).

Each alias is an entry point of the ``core.strategies`` group whose value is one of the factories below;
``DDPStrategy(...)`` is the object to pass for options: ``Lite(strategy=DDPStrategy(static_graph=True))``.

:class:`DDPStrategy` derives from the core's :class:`core.toolkit.strategies.ParallelStrategy`, which starts the
processes, sets up the process group and runs the collectives; a sharded strategy derives from that, not from
this plugin. :data:`START_METHODS`, the error types, :data:`JOB_VARIABLE`, :class:`RendezvousError` and
:func:`failing` are the core's (the same objects, re-exported here for code written against core-ddp).
"""

from __future__ import annotations

from typing import ClassVar, Final

from core import Supports
from core.toolkit.strategies import (
    JOB_VARIABLE,
    START_METHODS,
    CollectiveError,
    CollectiveTimeoutError,
    PeerLostError,
    ProcessFailedError,
    RendezvousError,
    failing,
)

from ._dp import DataParallelStrategy
from ._strategy import DDPStrategy


def ddp() -> DDPStrategy:
    """``ddp``: the script is run again as the other local ranks (unless a launcher already started them)."""
    return DDPStrategy(start_method="popen")


def ddp_spawn() -> DDPStrategy:
    """``ddp_spawn``: fresh processes via ``torch.multiprocessing`` spawn; rank 0's return value comes back."""
    return DDPStrategy(start_method="spawn")


def ddp_fork() -> DDPStrategy:
    """``ddp_fork``: forked processes; works in notebooks and REPLs, with CUDA only if it is not initialised yet."""
    return DDPStrategy(start_method="fork")


def ddp_notebook() -> DDPStrategy:
    """``ddp_notebook``: ``ddp_fork`` under the name notebook users look for."""
    return DDPStrategy(start_method="fork", name="ddp_notebook")


def ddp_find_unused_parameters_true() -> DDPStrategy:
    """``ddp`` for models where some parameters get no gradient in some steps."""
    return DDPStrategy(find_unused_parameters=True, name="ddp_find_unused_parameters_true")


DDP_CPU_SUPPORTS: Final = Supports(
    only={"accelerator": {"cpu"}},
    hint="'ddp_cpu' is Lightning 1.x's name for ddp_spawn on CPU processes; on another accelerator pass "
         "strategy='ddp_spawn' (or 'ddp') with that accelerator, or accelerator='cpu' to keep 'ddp_cpu'.",
)


class DDPCPUStrategy(DDPStrategy):
    """``ddp_cpu``: :class:`DDPStrategy` started by spawn on CPU processes only (Lightning 1.x's ``DDP_CPU``)."""

    supports: ClassVar[Supports] = DDP_CPU_SUPPORTS


def ddp_cpu() -> DDPStrategy:
    """``ddp_cpu``: the Lightning 1.x name (a legacy alias) for ``ddp_spawn`` with ``accelerator="cpu"``."""
    return DDPCPUStrategy(start_method="spawn", name="ddp_cpu")


def dp() -> DataParallelStrategy:
    """``dp``: ``torch.nn.DataParallel`` over several CUDA devices in one process."""
    return DataParallelStrategy()


__all__ = [
    "DDP_CPU_SUPPORTS",
    "JOB_VARIABLE",
    "START_METHODS",
    "CollectiveError",
    "CollectiveTimeoutError",
    "DDPCPUStrategy",
    "DDPStrategy",
    "DataParallelStrategy",
    "PeerLostError",
    "ProcessFailedError",
    "RendezvousError",
    "ddp",
    "ddp_cpu",
    "ddp_find_unused_parameters_true",
    "ddp_fork",
    "ddp_notebook",
    "ddp_spawn",
    "dp",
    "failing",
]
