"""Undoing ``parallelize_module`` and ``fully_shard`` at the end of a run: modules leave it plain and whole.

Both change the user's module in place and bind it to the run's device mesh, whose process groups the strategy
destroys at teardown: parameters become ``DTensor`` s, ``fully_shard`` swaps the class to ``FSDP<Class>`` and keeps
its state in instance attributes and a process-wide table, and both register forward hooks. Left so, the module
could neither compute after the run nor be parallelized again by the next one (``Trainer.test`` after
``Trainer.fit``), and it would keep the destroyed groups alive until interpreter exit, where gloo's threads can abort
the process.

The module may have been parallelized before the strategy saw it (in the launched function with
``lite.device_mesh``, in the Module's ``configure_model``), so nothing is recorded beforehand. What the
parallelization added is recognised by where it comes from: hooks whose function is defined in
``torch.distributed`` (or the core's load hooks, :func:`core.toolkit.strategies.accept_whole_tensors`), the
instance attributes listed below, the ``FSDP`` class. User hooks stay. What is left is checked, and a trace that
survives (a future torch) raises :class:`core.CoreError` instead of failing later.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import torch
from torch.distributed._composable_state import _module_state_mapping
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from core import CoreError

from ._state import whole

# Instance attributes fully_shard and distribute_module set (torch 2.6 to 2.13); state keys carry a uuid.
_ADDED_ATTRIBUTES: Final = frozenset({"_is_fsdp_managed_module", "_fsdp_use_orig_params", "_distribute_module_applied"})
_ADDED_ATTRIBUTE_PREFIXES: Final = ("__composable_api_state_key",)
_HOOK_ORIGINS: Final = ("torch.distributed.", "core.toolkit.strategies.", "core_model_parallel.")
# Companion dicts keyed by the same handle ids as a hook dict, holding flags rather than functions.
_FLAG_DICTS: Final = ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _origin(hook: Any) -> str:
    """The module that defined ``hook``, looking through wrappers (``_WrappedHook``, partials, bound methods)."""
    for _ in range(4):
        inner = getattr(hook, "hook", None) or getattr(hook, "func", None) or getattr(hook, "__func__", None)
        if inner is None or inner is hook:
            break
        hook = inner
    if isinstance(hook, functools.partial):
        hook = hook.func
    return str(getattr(hook, "__module__", "") or "")


def release(module: torch.nn.Module, originals: Mapping[int, torch.nn.Parameter]) -> None:
    """Make ``module`` plain and whole again; a collective (every rank, the same module).

    :param originals: By ``id`` of a ``DTensor`` parameter, the plain parameter it replaced at set-up, if still
        alive: it gets the trained values back, so references made before set-up (an optimizer) see them.
    """
    modules = list(module.modules())
    for submodule in modules:
        if isinstance(submodule, FSDPModule):
            submodule.reshard()  # the sharded parameters are the registered ones again
    with torch.no_grad():
        _replace_tensors(modules, originals)
    for submodule in modules:
        _remove_additions(submodule)
    for submodule in modules:
        _check_released(submodule)


def _replace_tensors(modules: list[torch.nn.Module], originals: Mapping[int, torch.nn.Parameter]) -> None:
    """Every ``DTensor`` parameter and buffer becomes a whole plain one; a shared parameter stays shared."""
    replacements: dict[int, torch.Tensor] = {}
    for submodule in modules:  # the same order on every rank: the gathers line up
        registries: tuple[dict[str, Any], ...] = (submodule._parameters, submodule._buffers)
        for registry in registries:
            for name, tensor in list(registry.items()):
                if not isinstance(tensor, DTensor):
                    continue
                if id(tensor) not in replacements:
                    replacements[id(tensor)] = _plain(tensor, originals.get(id(tensor)))
                registry[name] = replacements[id(tensor)]


def _plain(tensor: DTensor, original: torch.nn.Parameter | None) -> torch.Tensor:
    value = whole(tensor).to(tensor.to_local().device)
    if not isinstance(tensor, torch.nn.Parameter):
        return value
    if original is None or original.shape != value.shape or original.dtype != value.dtype:
        return torch.nn.Parameter(value, requires_grad=tensor.requires_grad)
    original.data = value
    return original


def _remove_additions(module: torch.nn.Module) -> None:
    attributes = vars(module)
    for name, registered in list(attributes.items()):
        if "hooks" not in name or not isinstance(registered, dict) or name in _FLAG_DICTS:
            continue
        for key, hook in list(registered.items()):
            if _origin(hook).startswith(_HOOK_ORIGINS):
                del registered[key]
                for flags in _FLAG_DICTS:
                    attributes.get(flags, {}).pop(key, None)
    for name in list(attributes):
        if name in _ADDED_ATTRIBUTES or name.startswith(_ADDED_ATTRIBUTE_PREFIXES):
            delattr(module, name)
    # fully_shard registers the module in a process-wide table; a later fully_shard refuses a module still in it.
    _module_state_mapping.pop(module, None)
    if isinstance(module, FSDPModule):
        module.__class__ = next(base for base in type(module).__bases__ if base is not FSDPModule)


def _check_released(module: torch.nn.Module) -> None:
    placed = [name for name, tensor in (*module._parameters.items(), *module._buffers.items())
              if isinstance(tensor, DTensor)]
    if isinstance(module, FSDPModule) or placed:
        raise CoreError(
            f"core-model-parallel could not undo the parallelization of a {type(module).__name__} with torch "
            f"{torch.__version__} (left: {placed or type(module).__name__}): the module stays bound to a destroyed "
            f"process group. Please report this to core-model-parallel with the torch version."
        )
