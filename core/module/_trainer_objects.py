"""The two objects the Trainer hands to a strategy.

``Trainer`` sets its Module up as a :class:`StepModule` (``Lite.setup(StepModule(module), *optimizers)``), and
saves its optimizers and schedulers as :class:`StatefulList` entries of a checkpoint (``"optimizer_states"``,
``"lr_schedulers"``). A strategy that only wraps modules and saves state dicts never needs either; one that
restructures the model (the pipeline strategy cuts ``step_module.stepped_module`` into stages) or saves optimizers
its own way (gathering them by parameter name) recognises them by the toolkit's protocols they implement,
:class:`core.toolkit.strategies.StepRunner` and :class:`core.toolkit.strategies.StatefulGroup`: strategies sit below
the Trainer and never import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from core._errors import CheckpointError

if TYPE_CHECKING:
    from core.module._module import Module


class StepModule(torch.nn.Module):
    """What the Trainer sets up: its forward runs the Module's current step method.

    The Trainer calls ``training_step`` (or ``validation_step``, ...) as the forward of the set-up module, so that
    the strategy's wrapper (DDP's gradient hooks, FSDP's gathers) and the precision's autocast and conversions
    cover the whole step, as ``model(x)`` would in a Lite loop.

    :param module: The user's :class:`core.Module`, registered as the submodule ``module``: a strategy sees the
        whole model through it, and ``state_dict`` keys gain a ``module.`` prefix (the Trainer saves the Module
        itself, not this wrapper).
    """

    core_wrapped_attribute: ClassVar[str] = "module"
    """The submodule holding the user's model: the precision converts it, not this wrapper (see ``Lite.setup``)."""

    def __init__(self, module: Module) -> None:
        super().__init__()
        self.module = module
        self.__dict__["step"] = module.training_step

    @property
    def stepped_module(self) -> torch.nn.Module:
        """The user's Module (:class:`core.toolkit.strategies.StepRunner`: how a strategy reaches it)."""
        return self.module

    @property
    def step(self) -> Callable[..., Any]:
        """The step method a call runs now (``module.training_step`` at first)."""
        step: Callable[..., Any] = self.__dict__["step"]
        return step

    def use(self, step: Callable[..., Any]) -> None:
        """Make calls run ``step`` (the Trainer switches to ``validation_step`` during validation, and back)."""
        self.__dict__["step"] = step

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["step"](*args, **kwargs)


class StatefulList:
    """Several stateful objects saved under one checkpoint key, as the list of their state dicts.

    :param items: The objects (optimizers as the user's code holds them, ``LiteOptimizer`` wrappers included;
        schedulers).
    :param what: What they are, plural ("optimizers"), for messages.
    """

    def __init__(self, items: Sequence[Any], what: str) -> None:
        self.items = list(items)
        self.what = what

    @property
    def stateful_items(self) -> list[Any]:
        """:attr:`items` (:class:`core.toolkit.strategies.StatefulGroup`: how a strategy finds each object)."""
        return self.items

    def state_dict(self) -> list[Any]:
        return [item.state_dict() for item in self.items]

    def load_state_dict(self, states: list[Any]) -> None:
        """Load one state per item; a checkpoint holding a different number raises :class:`core.CheckpointError`."""
        if not isinstance(states, list) or len(states) != len(self.items):
            found = f"{len(states)} {self.what}" if isinstance(states, list) else f"a {type(states).__name__}"
            raise CheckpointError(
                f"The checkpoint holds {found}, but configure_optimizers gave {len(self.items)} {self.what}; resume "
                f"with the same optimizers and schedulers, or load only the weights."
            )
        for index, (item, state) in enumerate(zip(self.items, states, strict=True)):
            try:
                item.load_state_dict(state)
            except ValueError as error:  # torch: other parameter groups, or groups of other sizes
                raise CheckpointError(
                    f"The checkpoint's state for {self.what} {index} ({type(item).__name__}) does not fit it: {error} "
                    f"Build the same parameter groups as the run that saved it (a fine-tuning callback that added "
                    f"groups must be passed again), or load only the weights."
                ) from error
