"""Undoing ``fully_shard`` at the end of a run: the modules a run sharded leave it as plain ``torch.nn.Module`` s.

``fully_shard`` changes a module in place: its parameters become ``DTensor`` shards over the run's device mesh,
its class becomes ``FSDP<Class>``, and FSDP's state and hooks are attached to it and to the submodules owning
parameters. All of that is bound to the run's process group, which the strategy destroys at teardown. Left as it
is, the module could neither compute nor be set up again by a later run (``Trainer.fit`` then ``Trainer.test``
starts a new run in the same processes), and through its shards' mesh it would keep the destroyed group alive
until interpreter exit, where gloo's worker threads abort the process ("terminate called without an active
exception").

So the strategy records each module tree before sharding it (:func:`snapshot`) and, before the group goes away,
puts it back (:func:`release`):

- a module that came in whole leaves whole: each parameter is gathered from the shards (a collective, in the
  same order on every rank) into the ``Parameter`` object it had before set-up when that is still alive (so an
  optimizer or a reference made before set-up sees the trained values, as under ``ddp``), else a new one;
- a module created empty (``Lite.init_module(empty_init=True)``) leaves empty: parameters and buffers go back to
  the meta device, as it came in (its values live in the checkpoints the run saved, and no rank ever has to hold
  the whole model);
- everything else ``fully_shard`` added is removed by comparison with the record: the class, the attributes,
  the hooks. That relies on how ``torch.nn.Module`` stores them, not on FSDP's internals; what is left is checked,
  and a trace of FSDP that survives (a future torch) raises :class:`core.CoreError` instead of failing later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch
from torch.distributed._composable_state import _module_state_mapping
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from core import CoreError
from core.toolkit.tensors import hook_keys, remove_added


@attrs.frozen(eq=False)
class ModuleRecord:
    """One module as it was before set-up."""

    module: torch.nn.Module
    cls: type[torch.nn.Module]
    attributes: frozenset[str]
    hooks: dict[str, frozenset[Any]]


def snapshot(root: torch.nn.Module) -> list[ModuleRecord]:
    """``root`` and each submodule as they are now, in the order :func:`release` goes through them."""
    return [ModuleRecord(module, type(module), frozenset(vars(module)), hook_keys(module))
            for module in root.modules()]


def release(
    records: list[ModuleRecord], whole: bool, device: torch.device, originals: Mapping[int, torch.nn.Parameter]
) -> None:
    """Put every recorded module back as it was, holding its trained values (``whole``: a collective) or on meta.

    :param device: The run's compute device, where the shards are gathered (they may be offloaded to the CPU).
    :param originals: By ``id`` of a sharded parameter, the parameter it replaced at set-up, if still alive.
    """
    for record in records:
        if isinstance(record.module, FSDPModule):
            record.module.reshard()  # the shards are registered again (reshard_after_forward=False keeps them whole)
    with torch.no_grad():
        _replace_tensors(records, whole, device, originals)
    for record in records:
        _restore(record)
    for record in records:
        _check_released(record)


def _replace_tensors(
    records: list[ModuleRecord], whole: bool, device: torch.device, originals: Mapping[int, torch.nn.Parameter]
) -> None:
    """Every ``DTensor`` parameter becomes a plain one; a parameter shared by several modules stays shared."""
    replacements: dict[int, torch.nn.Parameter] = {}
    for record in records:  # the same order on every rank: the gathers line up
        module = record.module
        for name, parameter in list(module._parameters.items()):
            if isinstance(parameter, DTensor):
                if id(parameter) not in replacements:
                    replacements[id(parameter)] = _plain(parameter, whole, device, originals.get(id(parameter)))
                module._parameters[name] = replacements[id(parameter)]
        if not whole:
            for name, buffer in list(module._buffers.items()):
                if buffer is not None and not buffer.is_meta:
                    module._buffers[name] = torch.empty_like(buffer, device="meta")


def _plain(
    shard: torch.nn.Parameter, whole: bool, device: torch.device, original: torch.nn.Parameter | None
) -> torch.nn.Parameter:
    if not whole:
        if original is not None and original.is_meta:
            return original
        return torch.nn.Parameter(torch.empty(shard.shape, dtype=shard.dtype, device="meta"), shard.requires_grad)
    value = _whole(shard, device)  # type: ignore[arg-type]
    if original is None or original.shape != value.shape or original.dtype != value.dtype:
        return torch.nn.Parameter(value, requires_grad=shard.requires_grad)
    original.data = value
    return original


def _whole(shard: DTensor, device: torch.device) -> torch.Tensor:
    """The whole tensor of ``shard``, on the device its local shard is on."""
    local = shard.to_local()
    on_mesh = DTensor.from_local(
        local.to(device), shard.device_mesh, shard.placements, shape=shard.shape, stride=shard.stride()
    )
    return on_mesh.full_tensor().to(local.device)


def _restore(record: ModuleRecord) -> None:
    """The class, attributes and hooks of ``record.module`` as recorded: what ``fully_shard`` added goes."""
    module = record.module
    remove_added(module, record.attributes, record.hooks)
    # fully_shard registers the module in a process-wide table; a later fully_shard refuses a module still in it.
    _module_state_mapping.pop(module, None)
    module.__class__ = record.cls


def _check_released(record: ModuleRecord) -> None:
    module = record.module
    sharded = [name for name, parameter in module.named_parameters(recurse=False) if isinstance(parameter, DTensor)]
    if isinstance(module, FSDPModule) or sharded:
        raise CoreError(
            f"core-fsdp could not undo fully_shard on a {record.cls.__name__} with torch {torch.__version__} "
            f"(left: {sharded or type(module).__name__}): the module stays sharded over a destroyed process group. "
            f"Please report this to core-fsdp with the torch version."
        )
