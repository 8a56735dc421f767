"""The checkpoint layout of a pipeline: the one the unsplit model would write.

Every rank holds its stages' part of each module and optimizer. A checkpoint is written as if nothing were split:
the module entry is the whole model's state dict (keys in the model's order), the optimizer entry numbers the
parameters of each group in the whole model's order, as ``optimizer.state_dict()`` does for an optimizer built over
``model.parameters()``. So a pipeline checkpoint loads into one process, into ``ddp`` or ``model_parallel``, and
into any other split; and their checkpoints load into the pipeline, each rank taking its stages' entries.

An optimizer's parameters are named by the whole model's parameter names (:class:`OptimizerLayout`); its state moves
between ranks keyed by those names (:func:`by_name`), and is numbered again on the way in and out
(:func:`numbered`, :func:`local_state`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from core import CheckpointError
from core.toolkit.tensors import apply_to_tensors


@attrs.frozen
class OptimizerLayout:
    """Which parameter (by name) each index of an optimizer's state dict is, here and in the whole model."""

    local: tuple[tuple[str, ...], ...]
    """Per group, the names of this rank's parameters, in the optimizer's order."""
    whole: tuple[tuple[str, ...], ...]
    """Per group, the names of every rank's parameters of that group, in the whole model's order."""


def whole_groups(memberships: Sequence[Mapping[str, int]], model_order: Sequence[str], groups: int) -> tuple[
    tuple[str, ...], ...
]:
    """Per group, every parameter any rank put in it, in the model's order (``memberships``: name -> group)."""
    group_of: dict[str, int] = {}
    for membership in memberships:
        group_of.update(membership)
    return tuple(tuple(name for name in model_order if group_of.get(name) == group) for group in range(groups))


def by_name(state_dict: Mapping[str, Any], layout: OptimizerLayout) -> dict[str, Any]:
    """This rank's optimizer state dict keyed by parameter names: ``{"groups": [...], "state": {name: ...}}``."""
    numbered = [index for group in state_dict["param_groups"] for index in group["params"]]
    names = [name for group in layout.local for name in group]
    name_of = dict(zip(numbered, names, strict=True))
    groups = [{key: value for key, value in group.items() if key != "params"} for group in state_dict["param_groups"]]
    state = cpu_state({name_of[index]: value for index, value in state_dict["state"].items()})
    return {"groups": groups, "state": state}


def numbered(pieces: Sequence[Mapping[str, Any]], layout: OptimizerLayout) -> dict[str, Any]:
    """The whole optimizer's state dict, numbered as the unsplit model's, from every rank's :func:`by_name` piece."""
    state_by_name: dict[str, Any] = {}
    for piece in pieces:
        state_by_name.update(piece["state"])
    groups, state, index = [], {}, 0
    for settings, names in zip(pieces[0]["groups"], layout.whole, strict=True):
        indices = []
        for name in names:
            if name in state_by_name:
                state[index] = state_by_name[name]
            indices.append(index)
            index += 1
        groups.append({**settings, "params": indices})
    return {"state": state, "param_groups": groups}


def local_state(saved: Mapping[str, Any], layout: OptimizerLayout, where: str) -> dict[str, Any]:
    """This rank's part of an optimizer state dict numbered as the unsplit model's, numbered as this optimizer's."""
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or [len(group.get("params", ())) for group in groups] != [
        len(names) for names in layout.whole
    ]:
        found = [len(group.get("params", ())) for group in groups] if isinstance(groups, list) else groups
        raise CheckpointError(
            f"The checkpoint {where} holds an optimizer with parameter groups of sizes {found}, but the whole model's "
            f"optimizer here has {[len(names) for names in layout.whole]}: build the optimizer over the same "
            f"parameters, in the same groups, as when it was saved (over model.parameters(), before setup)."
        )
    saved_state = saved.get("state", {})
    index_of = {name: saved_index for group, names in zip(groups, layout.whole, strict=True)
                for saved_index, name in zip(group["params"], names, strict=True)}
    local_groups, state, index = [], {}, 0
    for group, names in zip(groups, layout.local, strict=True):
        indices = []
        for name in names:
            if index_of[name] in saved_state:
                state[index] = saved_state[index_of[name]]
            indices.append(index)
            index += 1
        local_groups.append({**{key: value for key, value in group.items() if key != "params"}, "params": indices})
    return {"state": state, "param_groups": local_groups}


def merged_module_state(pieces: Sequence[Mapping[str, Any]], model_keys: Sequence[str]) -> dict[str, Any]:
    """The whole model's state dict from every rank's part, keys in the model's order."""
    values: dict[str, Any] = {}
    for piece in pieces:
        values.update(piece)
    missing = [key for key in model_keys if key not in values]
    if missing:
        raise CheckpointError(f"No stage holds {missing[:5]}: the pipeline's stages do not cover the model.")
    return {key: values[key] for key in model_keys}


def cpu_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state dict with every tensor detached and on the CPU (to send to rank 0)."""
    return {key: apply_to_tensors(value, _on_cpu) for key, value in state.items()}


def _on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu()
