"""What a strategy may know of the objects the runtime above it hands back: three protocols, no import of them.

Strategies sit below ``Lite`` and the Trainer (CONTRIBUTING.md's layers; an import contract forbids every plugin to
import ``core.lite``, ``core.module``, ``core.trainer``, ...). A strategy that must recognise what the layers above
made of the objects it set up (core-pipeline saves each optimizer in the whole model's layout, and runs the Trainer's
step methods through its schedule) checks for these protocols; ``Lite``'s and the Trainer's objects implement them.
The member names are distinctive on purpose: a structural check must not take a learning-rate scheduler (which has
an ``optimizer``) or a ``dict`` (which has ``items``) for one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch


@runtime_checkable
class OptimizerWrapper(Protocol):
    """What the runtime hands the user for an optimizer the strategy set up (Lite's ``LiteOptimizer``): its
    ``step`` goes through the strategy's hook, and it holds the optimizer ``strategy_setup_optimizer`` returned."""

    @property
    def set_up_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer as the strategy set it up (the object ``strategy_setup_optimizer`` returned)."""
        ...


@runtime_checkable
class StepRunner(Protocol):
    """A module whose call runs a step method of the model it holds (the Trainer's ``StepModule``:
    ``training_step``, ``validation_step``, ...), set up in the model's place. A strategy that changes how the model
    computes (core-pipeline sends the Module's ``self(...)`` through its schedule) reaches the model through it."""

    @property
    def stepped_module(self) -> torch.nn.Module:
        """The model whose step methods a call runs (the user's Module)."""
        ...


@runtime_checkable
class StatefulGroup(Protocol):
    """Several stateful objects saved under one checkpoint key as the list of their state dicts, in order (the
    Trainer's optimizers, its schedulers): a strategy that saves an optimizer in a layout of its own finds each one."""

    @property
    def stateful_items(self) -> Sequence[Any]:
        """The objects, in the order of the saved list."""
        ...

    def state_dict(self) -> list[Any]:
        """One state per object, in order."""
        ...

    def load_state_dict(self, states: list[Any]) -> None:
        """Load one state per object, in order."""
        ...
