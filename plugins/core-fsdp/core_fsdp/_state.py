"""Moving state between sharded ``DTensor`` parameters and whole tensors.

Saving a *full* checkpoint gathers every shard (a collective on every rank, in the same order everywhere)
and keeps the result on the CPU. Loading goes the other way without any communication: each rank holds
the whole saved tensor (read from a full file, or from a sharded checkpoint of any world size) and keeps
its own slice. Load hooks on the set-up module and optimizers do that slicing, so ``Lite.load`` restores
an FSDP model through the ordinary ``load_state_dict`` calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain
from typing import Any

import torch
from torch.distributed.tensor import DTensor, distribute_tensor


def map_tensors(value: Any, function: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``function`` applied to every tensor, in traversal order; containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, Mapping):
        rebuilt = type(value)((name, map_tensors(item, function)) for name, item in value.items())  # type: ignore[call-arg]
        attributes = getattr(value, "__dict__", None)
        if attributes:
            rebuilt.__dict__.update(attributes)
        return rebuilt
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(item, function) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(item, function) for item in value)
    return value


def gather_full(state: Any) -> Any:
    """``state`` with every ``DTensor`` replaced by its whole tensor on the CPU. Collective: call on every rank."""

    def full(tensor: torch.Tensor) -> torch.Tensor:
        if isinstance(tensor, DTensor):
            return tensor.full_tensor().cpu()
        return tensor

    return map_tensors(state, full)


def shard_like(value: torch.Tensor, like: DTensor) -> DTensor:
    """This rank's slice of the whole tensor ``value``, placed as ``like`` is. No communication."""
    return distribute_tensor(value.to(like.device), like.device_mesh, like.placements, src_data_rank=None)


def _needs_sharding(value: Any, like: DTensor) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == like.shape


def install_module_load_hook(module: torch.nn.Module) -> None:
    """Let ``load_state_dict`` take whole tensors for sharded parameters, called on ``module`` or any submodule.

    Each submodule holding sharded tensors of its own gets a hook for those, so the slicing happens
    whichever module ``load_state_dict`` is called on (the Trainer loads into the user's module, which the
    strategy sees inside its own root).
    """
    for submodule in module.modules():
        own = chain(submodule.named_parameters(recurse=False), submodule.named_buffers(recurse=False))
        layouts = {
            name: (tensor.device_mesh, tensor.placements, tensor.shape)
            for name, tensor in own
            if isinstance(tensor, DTensor)
        }
        if layouts:
            submodule.register_load_state_dict_pre_hook(_whole_to_shards(layouts))


def _whole_to_shards(layouts: dict[str, tuple[Any, Any, torch.Size]]) -> Callable[..., None]:
    def shard_whole_tensors(owner: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name, (mesh, placements, shape) in layouts.items():
            key = prefix + name
            value = state_dict.get(key)
            if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == shape:
                state_dict[key] = distribute_tensor(value, mesh, placements, src_data_rank=None)

    return shard_whole_tensors


def install_optimizer_load_hook(optimizer: torch.optim.Optimizer) -> None:
    """Let ``optimizer.load_state_dict`` take whole tensors for the state of sharded parameters."""

    def shard_whole_tensors(owner: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        parameters = [parameter for group in owner.param_groups for parameter in group["params"]]
        saved_ids = [saved for group in state_dict.get("param_groups", []) for saved in group["params"]]
        saved_state = state_dict.get("state", {})
        for saved, parameter in zip(saved_ids, parameters, strict=False):
            entry = saved_state.get(saved)
            if not isinstance(parameter, DTensor) or not isinstance(entry, dict):
                continue
            for key, value in list(entry.items()):
                if _needs_sharding(value, parameter):
                    entry[key] = shard_like(value, parameter)
        return state_dict

    optimizer.register_load_state_dict_pre_hook(shard_whole_tensors)


def local_elements(module: torch.nn.Module) -> int:
    """How many parameter elements this rank holds (its shards, for sharded parameters)."""
    return sum(
        parameter.to_local().numel() if isinstance(parameter, DTensor) else parameter.numel()
        for parameter in module.parameters()
    )
