"""State of strategies whose parameters become ``DTensor`` s (fsdp, model_parallel): one implementation for both.

Saving a *full* checkpoint gathers every ``DTensor`` into its whole tensor on the CPU (a collective: every rank,
the same order). Loading goes the other way without communication: every rank holds the whole saved tensor (a
full file, or a sharded checkpoint of any layout read whole) and keeps its own part, placed as the parameter is.
Load hooks on the set-up module and optimizers do that, so ``Lite.load`` restores through the ordinary
``load_state_dict`` calls, whatever layout wrote the checkpoint: that is the resharding.

``torch.distributed.tensor`` is imported on first use: importing the toolkit's strategies stays light.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from core.toolkit.tensors import apply_to_tensors

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

# full_tensor() of a parameter sharded on two mesh dimensions logs that it gathers twice: expected here.
_REDISTRIBUTE_LOGGER = logging.getLogger("torch.distributed.tensor._redistribute")


@contextmanager
def _quiet_redistribution() -> Iterator[None]:
    level = _REDISTRIBUTE_LOGGER.level
    _REDISTRIBUTE_LOGGER.setLevel(logging.ERROR)
    try:
        yield
    finally:
        _REDISTRIBUTE_LOGGER.setLevel(level)


def _is_dtensor(value: Any) -> TypeGuard[DTensor]:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of ``tensor`` on the CPU: gathered if it is a ``DTensor`` (a collective), else itself."""
    if not _is_dtensor(tensor):
        return tensor
    with _quiet_redistribution():
        return tensor.full_tensor().cpu()


def gather_full_state(state: Any) -> Any:
    """``state`` with every ``DTensor`` replaced by its whole tensor on the CPU. Collective: call on every rank."""
    return apply_to_tensors(state, whole_tensor)


def _placed_like(value: torch.Tensor, mesh: Any, placements: Any, device: torch.device, dtype: torch.dtype) -> Any:
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value.to(device, dtype), mesh, placements, src_data_rank=None)


def _is_whole_for(value: Any, shape: torch.Size) -> TypeGuard[torch.Tensor]:
    return isinstance(value, torch.Tensor) and not _is_dtensor(value) and value.shape == shape


def accept_whole_tensors(module: torch.nn.Module) -> None:
    """Let ``load_state_dict`` take whole tensors for ``DTensor`` parameters and buffers, on any submodule.

    Each submodule holding ``DTensor`` s of its own gets a hook for those, so the slicing happens whichever module
    ``load_state_dict`` is called on (the Trainer loads into the user's module, inside the strategy's root). The
    hooks hold the layouts, not the tensors.
    """
    for submodule in module.modules():
        own = chain(submodule.named_parameters(recurse=False), submodule.named_buffers(recurse=False))
        layouts = {
            name: (tensor.device_mesh, tensor.placements, tensor.shape, tensor.device, tensor.dtype)
            for name, tensor in own
            if _is_dtensor(tensor)
        }
        if layouts:
            submodule.register_load_state_dict_pre_hook(_whole_to_placed(layouts))


def _whole_to_placed(layouts: dict[str, tuple[Any, Any, torch.Size, torch.device, torch.dtype]]) -> Callable[..., None]:
    def place_whole_tensors(owner: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name, (mesh, placements, shape, device, dtype) in layouts.items():
            value = state_dict.get(prefix + name)
            if _is_whole_for(value, shape):
                state_dict[prefix + name] = _placed_like(value, mesh, placements, device, dtype)

    return place_whole_tensors


def accept_whole_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Let ``optimizer.load_state_dict`` take whole tensors for the state of ``DTensor`` parameters."""

    def place_whole_tensors(owner: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        parameters = [parameter for group in owner.param_groups for parameter in group["params"]]
        saved_ids = [saved for group in state_dict.get("param_groups", []) for saved in group["params"]]
        saved_state = state_dict.get("state", {})
        for saved, parameter in zip(saved_ids, parameters, strict=False):
            entry = saved_state.get(saved)
            if not _is_dtensor(parameter) or not isinstance(entry, dict):
                continue
            for key, value in list(entry.items()):
                if _is_whole_for(value, parameter.shape):
                    entry[key] = _placed_like(value, parameter.device_mesh, parameter.placements, parameter.device,
                                              parameter.dtype)
        return state_dict

    optimizer.register_load_state_dict_pre_hook(place_whole_tensors)


class ReplacedParameters:
    """Which parameter replaced which when a strategy set a module up (``fully_shard``, ``parallelize_module``).

    An optimizer made over the module before set-up holds the old parameters: :meth:`point_optimizer` points it
    at their replacements. At teardown :meth:`originals` gives each replacement's original, still alive, so that
    a strategy making the module whole again puts the trained values where references made before set-up see
    them (as under ``ddp``).
    """

    def __init__(self) -> None:
        # id(original parameter) -> (a weak reference to it, the parameter that replaced it)
        self._entries: dict[int, tuple[weakref.ref[torch.nn.Parameter], torch.nn.Parameter]] = {}

    def record(self, before: Mapping[str, torch.nn.Parameter], module: torch.nn.Module) -> None:
        """Compare ``module``'s parameters now with ``before`` (``dict(module.named_parameters())`` then)."""
        for name, now in module.named_parameters():
            original = before.get(name)
            if original is not None and original is not now:
                self._entries[id(original)] = (weakref.ref(original), now)

    def replacement(self, parameter: torch.nn.Parameter) -> torch.nn.Parameter:
        """What replaced ``parameter`` at set-up, or ``parameter`` itself."""
        entry = self._entries.get(id(parameter))
        if entry is not None and entry[0]() is parameter:
            return entry[1]
        return parameter

    def point_optimizer(self, optimizer: torch.optim.Optimizer, alias: str) -> None:
        """Point an optimizer made before set-up at the replacements; refused once it holds state."""
        from core import ConfigurationError

        if optimizer.state:
            raise ConfigurationError(
                f"The optimizer already has state (it took a step before setup); with {alias!r} its state must be "
                f"made for the set-up parameters: set up the module and the optimizer before the first step."
            )
        for group in optimizer.param_groups:
            group["params"] = [self.replacement(parameter) for parameter in group["params"]]

    def originals(self) -> dict[int, torch.nn.Parameter]:
        """By ``id`` of each replacement, the original parameter, for those still alive."""
        found = {id(now): original() for original, now in self._entries.values()}
        return {key: original for key, original in found.items() if original is not None}

    def clear(self) -> None:
        self._entries.clear()


def holds_dtensors(module: torch.nn.Module) -> bool:
    """Whether any parameter of ``module`` is a ``DTensor`` (it was sharded or parallelized)."""
    return any(_is_dtensor(parameter) for parameter in module.parameters())

