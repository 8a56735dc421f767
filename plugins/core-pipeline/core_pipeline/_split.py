"""Cutting a model into pipeline stages that keep the whole model's parameter names.

A stage is the model with the other stages' submodules removed, not a new module: its ``state_dict`` keys are the
whole model's (``layers.2.attn.q.weight`` on whichever stage holds layer 2), so checkpoints move between a pipeline,
one process and other meshes without renaming. A removed child of a container (``ModuleDict``, ``ModuleList``,
``Sequential``) is deleted from it, keeping the other children's names; a removed attribute child becomes ``None``,
so a ``forward`` written as ``self.norm(h) if self.norm is not None else h`` runs on every stage.

Two ways to say where the stages are:

- **split points**: the names of the submodules that begin stages 1, 2, ... in the model's order (the order its
  children are registered, which must be the order ``forward`` runs them). A module containing a split point is
  cut inside; any other module goes whole to the stage it falls in.
- **a stage function** ``fn(model, stage_index, num_stages) -> module`` returning the stage's module, built from the
  model's own submodules (the stage's parameters must be the model's parameter objects).

Each stage's module is a *view*: a shallow copy of the containers along the cut, sharing the submodules (and so the
parameters) with the model. The model itself is then pruned in place to the stages this rank holds, so that the
module ``Lite.setup`` hands back is this rank's part, with the whole model's names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import attrs
import torch
from torch import nn

from core import ConfigurationError

StageFn = Callable[[nn.Module, int, int], nn.Module]
"""``fn(model, stage_index, num_stages) -> the stage's module``."""

_CONTAINERS = (nn.ModuleDict, nn.ModuleList, nn.Sequential)


@attrs.frozen
class Split:
    """The submodules (by name) of each stage, in the model's order."""

    stages: tuple[tuple[str, ...], ...]

    @property
    def num_stages(self) -> int:
        return len(self.stages)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:length]) for length in range(1, len(parts))]


def split_at(model: nn.Module, split_points: Sequence[str]) -> Split:
    """The stages that ``split_points`` cut ``model`` into; a :class:`core.ConfigurationError` names what is wrong."""
    names = dict(model.named_modules(remove_duplicate=False))
    unknown = [point for point in split_points if point not in names or point == ""]
    if unknown:
        children = [name for name in names if name]
        raise ConfigurationError(
            f"split_points={list(split_points)}: {unknown} name no submodule of {type(model).__name__}; split points "
            f"are names from model.named_modules(), such as {children[:8]}."
        )
    if len(set(split_points)) != len(split_points):
        raise ConfigurationError(f"split_points={list(split_points)} names a submodule twice.")
    cut = {"", *chain.from_iterable(_ancestors(point) for point in split_points)}
    stages: list[list[str]] = [[]]
    expected = iter(split_points)
    upcoming = next(expected, None)

    def visit(module: nn.Module, prefix: str) -> None:
        nonlocal upcoming
        own = [name for name, _ in chain(module.named_parameters(recurse=False), module.named_buffers(recurse=False))]
        if own:
            where = prefix.rstrip(".") or type(model).__name__
            raise ConfigurationError(
                f"The pipeline split cuts through {where!r}, which holds tensors of its own ({own}): they would belong "
                f"to no stage. Move them into a submodule, or choose split points outside {where!r}."
            )
        for name, child in module.named_children():
            full = prefix + name
            if full in split_points:
                if full != upcoming:
                    raise ConfigurationError(
                        f"split_points={list(split_points)} are not in the model's order: {full!r} comes before "
                        f"{upcoming!r} in {type(model).__name__}. List them in the order forward runs them."
                    )
                stages.append([])
                upcoming = next(expected, None)
            if full in cut:
                visit(child, full + ".")
            else:
                stages[-1].append(full)

    visit(model, "")
    empty = [index for index, stage in enumerate(stages) if not stage]
    if empty:
        raise ConfigurationError(
            f"split_points={list(split_points)} leave stage(s) {empty} without any submodule; each split point must "
            f"start a stage after at least one submodule."
        )
    split = Split(tuple(tuple(stage) for stage in stages))
    _check_untied(model, split)
    return split


def _check_untied(model: nn.Module, split: Split) -> None:
    """Refuse a parameter shared by two stages (tied embeddings): each stage would train its own copy."""
    owner: dict[int, int] = {}
    names = dict(model.named_modules())
    for index, stage in enumerate(split.stages):
        for unit in stage:
            for name, parameter in names[unit].named_parameters(prefix=unit):
                if owner.setdefault(id(parameter), index) != index:
                    raise ConfigurationError(
                        f"The parameter {name!r} is shared by stages {owner[id(parameter)]} and {index} (tied "
                        f"weights); a pipeline stage cannot update another stage's parameter. Untie them, or put both "
                        f"users in one stage."
                    )


def view(model: nn.Module, units: Iterable[str]) -> nn.Module:
    """A module sharing ``model``'s submodules that holds only ``units`` (and the containers leading to them)."""
    keep = set(units)
    needed = {"", *chain.from_iterable(_ancestors(unit) for unit in keep)}

    def copy_of(module: nn.Module, prefix: str) -> nn.Module:
        copied = copy.copy(module)  # shares parameters, buffers and hooks; gets its own dict of children below
        children: dict[str, nn.Module | None] = {}
        for name, child in module._modules.items():
            full = prefix + name
            if full in keep or child is None:
                children[name] = child
            elif full in needed:
                children[name] = copy_of(child, full + ".")
            elif not isinstance(module, _CONTAINERS):
                children[name] = None
        copied.__dict__["_modules"] = children
        return copied

    return copy_of(model, "")


def prune(model: nn.Module, kept: Iterable[torch.Tensor]) -> None:
    """Remove from ``model``, in place, every submodule and tensor not among ``kept`` (by identity).

    A submodule none of whose parameters and buffers is kept goes (deleted from a container, ``None`` elsewhere);
    one whose tensors are all kept stays whole; others are pruned inside. Submodules without tensors stay.
    """
    keep = {id(tensor) for tensor in kept}

    def tensors(module: nn.Module) -> list[torch.Tensor]:
        return [*module.parameters(), *module.buffers()]

    def visit(module: nn.Module) -> None:
        for registry in (module._parameters, module._buffers):
            for name in [name for name, tensor in registry.items() if tensor is not None and id(tensor) not in keep]:
                del registry[name]
        for name, child in list(module._modules.items()):
            if child is None:
                continue
            held = tensors(child)
            if not held or all(id(tensor) in keep for tensor in held):
                continue
            if not any(id(tensor) in keep for tensor in held):
                if isinstance(module, _CONTAINERS):
                    del module._modules[name]
                else:
                    module._modules[name] = None
            else:
                visit(child)

    visit(model)


def stage_modules(
    model: nn.Module, split: Split | None, stage_fn: StageFn | None, stage_indices: Sequence[int], num_stages: int
) -> list[nn.Module]:
    """This rank's stage modules, from the split or the stage function; each shares ``model``'s parameters."""
    if split is not None:
        return [view(model, split.stages[index]) for index in stage_indices]
    assert stage_fn is not None
    owned = {id(tensor) for tensor in chain(model.parameters(), model.buffers())}
    stages = []
    for index in stage_indices:
        stage = stage_fn(model, index, num_stages)
        if not isinstance(stage, nn.Module):
            raise ConfigurationError(
                f"stage_fn(model, {index}, {num_stages}) returned a {type(stage).__name__}; it must return the stage's "
                f"torch.nn.Module."
            )
        foreign = [name for name, tensor in chain(stage.named_parameters(), stage.named_buffers())
                   if id(tensor) not in owned]
        if foreign:
            raise ConfigurationError(
                f"stage_fn(model, {index}, {num_stages}) returned a module whose tensors {foreign[:5]} are not the "
                f"model's (a deep copy?). Build the stage from the model's own submodules, so that the model can be "
                f"pruned to them and keep its parameter names (core_pipeline.view(model, names) does that)."
            )
        stages.append(stage)
    return stages
