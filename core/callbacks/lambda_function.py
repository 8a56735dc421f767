"""``LambdaCallback``: a callback made of functions, one per hook (Lightning's name and arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core._errors import ConfigurationError
from core.callbacks._callback import HOOK_NAMES, Callback


class LambdaCallback(Callback):
    """``LambdaCallback(on_train_epoch_end=lambda trainer, module: ...)``: each keyword is a hook name.

    The functions take the same arguments as the :class:`Callback` methods they stand for.
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        unknown = sorted(set(hooks) - set(HOOK_NAMES))
        if unknown:
            raise ConfigurationError(
                f"LambdaCallback({', '.join(f'{name}=...' for name in unknown)}): not callback hooks; the hooks are "
                f"{sorted(HOOK_NAMES)}."
            )
        for name, function in hooks.items():
            if not callable(function):
                raise ConfigurationError(f"LambdaCallback({name}={function!r}): expected a function.")
            setattr(self, name, function)  # an instance attribute: found before the base class's no-op

    @property
    def state_key(self) -> str:
        return self._state_key_with(hooks=sorted(name for name in vars(self) if name in HOOK_NAMES))
