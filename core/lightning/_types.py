"""The type names of ``lightning.fabric.utilities.types`` and ``lightning.pytorch.utilities.types``.

Programs import them to annotate (``STEP_OUTPUT``, ``OptimizerLRScheduler``) and to test what
``configure_optimizers`` returned (``isinstance(x, Optimizable)``). They are torch's classes or structural
protocols, so they hold for core's objects as for Lightning's. ``LRScheduler`` and ``ReduceLROnPlateau`` are
torch's; Lightning 2.6.5 dropped them from ``fabric.utilities.types``, but its own build-your-own-trainer example
still reads them there, so they stay.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

import torch
from torch import Tensor
from torch.distributed import ProcessGroup, ReduceOp
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "CollectibleGroup",
    "DistributedDataParallel",
    "LRScheduler",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "Optimizable",
    "OptimizerConfig",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
    "ProcessGroup",
    "RedOpType",
    "ReduceLROnPlateau",
    "ReduceOp",
    "Steppable",
    "UntypedStorage",
]

UntypedStorage = torch.UntypedStorage
RedOpType = ReduceOp.RedOpType

STEP_OUTPUT = Tensor | Mapping[str, Any] | None
"""What a step method returns: a loss tensor, a dict with ``"loss"``, or None."""
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any

LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerType = type[LRScheduler] | type[ReduceLROnPlateau]
LRSchedulerPLType = LRSchedulerTypeUnion


@runtime_checkable
class CollectibleGroup(Protocol):
    """A process group: anything with ``size()`` and ``rank()``."""

    def size(self) -> int: ...

    def rank(self) -> int: ...


@runtime_checkable
class Steppable(Protocol):
    """Anything with ``step(closure=None)``, as an optimizer has."""

    def step(self, closure: Callable[[], float] | None = ...) -> float | None: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer, structurally: ``step``, ``param_groups``, ``defaults``, ``state`` and its state dict."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: defaultdict[Tensor, Any]

    def state_dict(self) -> dict[str, dict[Any, Any]]: ...

    def load_state_dict(self, state_dict: dict[str, dict[Any, Any]]) -> None: ...


@runtime_checkable
class DistributedDataParallel(Protocol):
    """A data-parallel module wrapper, structurally: it has ``no_sync()``."""

    @contextmanager
    def no_sync(self) -> Generator[None, None, None]: ...


@dataclass
class LRSchedulerConfig:
    """A scheduler and when to step it (the dict form of ``configure_optimizers``' ``lr_scheduler``)."""

    scheduler: LRScheduler | ReduceLROnPlateau
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


class LRSchedulerConfigType(TypedDict, total=False):
    scheduler: LRScheduler | ReduceLROnPlateau
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerConfig(TypedDict):
    optimizer: Optimizer


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    optimizer: Optimizer
    lr_scheduler: LRScheduler | ReduceLROnPlateau | LRSchedulerConfigType
    monitor: str


OptimizerLRScheduler = (
    Optimizer
    | Sequence[Optimizer]
    | tuple[Sequence[Optimizer], Sequence[LRScheduler | ReduceLROnPlateau | LRSchedulerConfig]]
    | OptimizerConfig
    | OptimizerLRSchedulerConfig
    | Sequence[OptimizerConfig]
    | Sequence[OptimizerLRSchedulerConfig]
    | None
)
"""Every shape ``configure_optimizers`` may return."""
