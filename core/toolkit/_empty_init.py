"""Modules created without running their initialisation, and modules on the meta device made real.

:class:`EmptyInit` is Lightning's ``_EmptyInit`` (after Thomas Viehmann's faster model init): inside it every
``torch.nn.init`` function returns its tensor untouched, so a module's parameters hold uninitialised memory and no
random number is drawn. :func:`materialize_meta_tensors` is Lightning's ``_materialize_meta_tensors``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from core._errors import ConfigurationError


class EmptyInit(TorchFunctionMode):
    """A context in which ``torch.nn.init.*`` does nothing: new modules hold uninitialised memory.

    ``Lite.init_module(empty_init=True)`` enters it on one device and under data-parallel strategies, as
    Lightning's ``Fabric.init_module`` does; sharding strategies create the module on the meta device instead.
    """

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled

    def __torch_function__(self, func: Callable[..., Any], types: Sequence[type], args: Sequence[Any] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.enabled and getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


def materialize_meta_tensors(module: torch.nn.Module, device: torch.device | str | int) -> None:
    """Allocate, on ``device``, every submodule of ``module`` that has a tensor on the meta device, and
    initialise it with its ``reset_parameters()`` (Lightning's ``_materialize_meta_tensors``).

    :raises core.ConfigurationError: such a submodule has no ``reset_parameters`` method.
    """
    for submodule in module.modules():
        tensors = chain(submodule.parameters(recurse=False), submodule.buffers(recurse=False))
        if not any(tensor.is_meta for tensor in tensors):
            continue
        submodule.to_empty(device=device, recurse=False)
        reset = getattr(submodule, "reset_parameters", None)
        if reset is None:
            raise ConfigurationError(
                f"materialize_meta_tensors: {type(submodule).__name__} has tensors on the meta device and no "
                "reset_parameters() method to initialise them; define one, or create the module on a real device."
            )
        if callable(reset):
            reset()
