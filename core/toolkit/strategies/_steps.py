"""``optimizer_step``: the one way a strategy steps an optimizer through the run's precision.

Calling the hook ``active.hook.precision_optimizer_step(...)`` from a strategy looks right and is not. The hook
is optional: with a precision that does not implement it, pluggy finds no implementation and returns ``None``
without stepping, so the run silently never trains. Reading that ``None`` as "step it myself" does not help
either: the built-in precisions return what ``optimizer.step()`` returned, which is ``None`` for most
optimizers, so every step would be taken twice. Whether an implementation exists is known from the active set,
not from the result; :func:`optimizer_step` asks the active set, as ``Lite`` does for its own default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from core.registry._active import ActiveSet


def _plain_step(optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
    """What stepping means when no precision implements ``precision_optimizer_step``: ``optimizer.step()``."""
    return optimizer.step(**kwargs)


def optimizer_step(
    active: ActiveSet,
    optimizer: torch.optim.Optimizer,
    closure: Callable[[], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Step ``optimizer`` exactly once through the run's precision; return what the step returned.

    The precision's ``precision_optimizer_step`` runs the step where the precision implements it (a gradient
    scaler may then skip a step whose gradients hold inf or nan, as it should); otherwise
    ``optimizer.step(closure, **kwargs)`` runs. A strategy's ``strategy_optimizer_step`` calls it with the
    ``kwargs`` it received: ``return optimizer_step(self.active, optimizer, **kwargs)``.

    :param active: The run's active set (a strategy's ``self.active``).
    :param optimizer: The optimizer to step, as the strategy set it up.
    :param closure: Recomputes the loss (``torch.optim.LBFGS``); evaluated by the optimizer, once per evaluation
        it asks for.
    :param kwargs: Further keyword arguments of ``optimizer.step``.
    """
    if closure is not None:
        kwargs["closure"] = closure
    # Bound per call (about a microsecond): a strategy object may serve several runs with different precisions.
    step = active.bind("precision_optimizer_step", default=_plain_step)
    return step(optimizer=optimizer, kwargs=kwargs)
