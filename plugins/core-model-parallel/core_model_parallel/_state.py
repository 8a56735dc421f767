"""Moving state between ``DTensor`` parameters (tensor-parallel and/or sharded) and whole tensors.

Saving a *full* checkpoint gathers every ``DTensor`` into its whole tensor on the CPU (a collective: every rank, the
same order). Loading goes the other way without communication: every rank holds the whole saved tensor (a full file,
or a sharded checkpoint of any mesh that core-dcp reads whole) and keeps its own part of it, placed as the parameter
is. Load hooks on the set-up module and optimizers do that, so ``Lite.load`` restores through the ordinary
``load_state_dict`` calls, whatever mesh wrote the checkpoint: that is the resharding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from typing import Any

import torch
from torch.distributed.tensor import DTensor, distribute_tensor

from core.toolkit import apply_to_tensors

# full_tensor() of a parameter sharded on both mesh dimensions logs that it gathers twice: expected here.
_REDISTRIBUTE_LOGGER = logging.getLogger("torch.distributed.tensor._redistribute")


@contextmanager
def _quiet_redistribution() -> Iterator[None]:
    level = _REDISTRIBUTE_LOGGER.level
    _REDISTRIBUTE_LOGGER.setLevel(logging.ERROR)
    try:
        yield
    finally:
        _REDISTRIBUTE_LOGGER.setLevel(level)


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of ``tensor`` on the CPU: gathered if it is a ``DTensor`` (collective), else itself."""
    if not isinstance(tensor, DTensor):
        return tensor
    with _quiet_redistribution():
        return tensor.full_tensor().cpu()


def gather_full(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with every ``DTensor`` replaced by its whole tensor on the CPU. Collective: call on every rank."""
    gathered = {}
    for key, value in state.items():
        converted = apply_to_tensors(value, whole)
        attributes = getattr(value, "__dict__", None)
        if attributes and isinstance(converted, Mapping):  # a module state dict's _metadata (version numbers)
            converted.__dict__.update(attributes)
        gathered[key] = converted
    return gathered


def placed_like(value: torch.Tensor, like: DTensor) -> DTensor:
    """This rank's part of the whole tensor ``value``, placed as ``like`` is. No communication."""
    return distribute_tensor(value.to(like.device, like.dtype), like.device_mesh, like.placements, src_data_rank=None)


def _is_whole_for(value: Any, like: DTensor) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == like.shape


def install_module_load_hook(module: torch.nn.Module) -> None:
    """Let ``load_state_dict`` take whole tensors for ``DTensor`` parameters and buffers, on any submodule."""
    for submodule in module.modules():
        own = chain(submodule.named_parameters(recurse=False), submodule.named_buffers(recurse=False))
        placed = {name: tensor for name, tensor in own if isinstance(tensor, DTensor)}
        if placed:
            submodule.register_load_state_dict_pre_hook(_whole_to_placed(placed))


def _whole_to_placed(placed: dict[str, DTensor]) -> Callable[..., None]:
    def place_whole_tensors(owner: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name, like in placed.items():
            value = state_dict.get(prefix + name)
            if isinstance(value, torch.Tensor) and _is_whole_for(value, like):
                state_dict[prefix + name] = placed_like(value, like)

    return place_whole_tensors


def install_optimizer_load_hook(optimizer: torch.optim.Optimizer) -> None:
    """Let ``optimizer.load_state_dict`` take whole tensors for the state of ``DTensor`` parameters."""

    def place_whole_tensors(owner: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        parameters = [parameter for group in owner.param_groups for parameter in group["params"]]
        saved_ids = [saved for group in state_dict.get("param_groups", []) for saved in group["params"]]
        saved_state = state_dict.get("state", {})
        for saved, parameter in zip(saved_ids, parameters, strict=False):
            entry = saved_state.get(saved)
            if not isinstance(parameter, DTensor) or not isinstance(entry, dict):
                continue
            for key, value in list(entry.items()):
                if _is_whole_for(value, parameter):
                    entry[key] = placed_like(value, parameter)
        return state_dict

    optimizer.register_load_state_dict_pre_hook(place_whole_tensors)


def holds_placed_tensors(module: torch.nn.Module) -> bool:
    """Whether any parameter of ``module`` is a ``DTensor`` (it was parallelized)."""
    return any(isinstance(parameter, DTensor) for parameter in module.parameters())
