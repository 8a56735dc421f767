"""Which arguments a Module's step methods take, decided once per run as Lightning decides it.

Lightning passes ``batch_idx`` to ``training_step`` / ``validation_step`` / ``test_step`` / ``predict_step`` only
when the method can take it (``def training_step(self, batch)`` is allowed), and ``dataloader_idx`` to the evaluation
steps only when there are several loaders. The signature is read here once, when a loop starts, so a batch pays
for one ``if`` and nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from core._errors import ConfigurationError

__all__ = ["check_dataloader_idx", "takes_batch_idx"]


def takes_param(hook: Callable[..., Any], name: str, explicit: bool = False, min_args: int | None = None) -> bool:
    """Whether ``hook`` (a bound method) accepts ``name``: Lightning's ``is_param_in_hook_signature``.

    True when ``name`` is one of its parameters, when it takes ``*args`` (unless ``explicit``), or when it has at
    least ``min_args`` parameters besides ``self`` (the second one is then taken to be that argument, whatever
    its name).
    """
    target = getattr(hook, "__wrapped__", hook)  # a decorated step: the function under the decorator
    spec = inspect.getfullargspec(target)
    args = spec.args[1:]  # without self (getfullargspec keeps it for a bound method)
    return (
        name in args
        or (not explicit and spec.varargs is not None)
        or (min_args is not None and len(args) >= min_args)
    )


def takes_batch_idx(step: Callable[..., Any]) -> bool:
    """Whether the loops pass ``batch_idx`` to ``step`` (Lightning's rule: named so, ``*args``, or two
    parameters after ``self``)."""
    return takes_param(step, "batch_idx", min_args=2)


def check_dataloader_idx(module: Any, step_name: str, several: bool, data: str) -> None:
    """Refuse a step whose ``dataloader_idx`` does not fit the number of loaders, as Lightning does before a loop.

    :param several: Whether the loop runs several loaders (then ``dataloader_idx`` is passed, so the step must
        take it); with one loader a ``dataloader_idx`` without a default would never be given.
    :param data: The data's name for messages (``val``, ``test``, ``predict``).
    """
    step = getattr(module, step_name)
    present = takes_param(step, "dataloader_idx")
    owner = type(module).__qualname__
    if several and not present:
        raise ConfigurationError(
            f"{owner}.{step_name}() takes no dataloader_idx, but there are several {data} DataLoaders and the "
            f"Trainer passes each batch's loader index: add dataloader_idx=0 to its signature."
        )
    if not several and present:
        parameters = inspect.signature(step).parameters
        required = parameters.get("dataloader_idx")
        if required is not None and required.default is inspect.Parameter.empty:
            raise ConfigurationError(
                f"{owner}.{step_name}() requires dataloader_idx, but there is one {data} DataLoader, so the Trainer "
                f"does not pass it: remove the argument or give it a default (dataloader_idx=0)."
            )
