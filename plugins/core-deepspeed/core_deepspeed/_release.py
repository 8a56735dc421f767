"""Giving a module back at the end of a DeepSpeed run as it came in, holding the trained weights.

``deepspeed.initialize`` changes the module it is given in place: under ZeRO-3 each parameter is partitioned
(its data emptied, its slice kept in ``ds_tensor``) and every submodule gets hooks, attributes and a parameter
dictionary that gathers partitions on access; under every stage the parameters get attributes bound to the run's
process group. The strategy destroys that group at teardown, so a module left like this cannot be evaluated or
set up again by a later run in the same processes (``Trainer.test`` after ``Trainer.fit``).

So the strategy records each module tree before handing it to DeepSpeed (:func:`snapshot`) and at teardown:

1. gathers the whole value of every parameter the run partitioned (:func:`gather`, a collective in the same
   order on every rank, while the group is alive);
2. after the engines are destroyed, removes what DeepSpeed added by comparison with the record (attributes and
   hooks of the submodules and the parameters, the gathering parameter dictionary) and puts the gathered values
   back in the same ``Parameter`` objects, in the dtype they came in (:func:`restore`).

This relies on how ``torch.nn.Module`` stores its state, not on DeepSpeed's internals. A module created already
partitioned (``Lite.init_module(empty_init=True)`` under ZeRO-3) is left as it is: it belongs to its run.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from core.toolkit.tensors import hook_keys, remove_added


@attrs.frozen(eq=False)
class ModuleRecord:
    module: torch.nn.Module
    attributes: frozenset[str]
    hooks: dict[str, frozenset[Any]]
    parameters_type: type[Any]
    buffer_dtypes: dict[str, torch.dtype]


@attrs.frozen(eq=False)
class ParameterRecord:
    parameter: torch.nn.Parameter
    attributes: frozenset[str]
    dtype: torch.dtype

    @property
    def partitioned_before(self) -> bool:
        """Partitioned when it was set up (created under ``deepspeed.zero.Init``)."""
        return "ds_id" in self.attributes


@attrs.frozen(eq=False)
class Snapshot:
    """A module tree before ``deepspeed.initialize``, in the order every rank goes through it."""

    modules: list[ModuleRecord]
    parameters: list[ParameterRecord]


def snapshot(root: torch.nn.Module) -> Snapshot:
    modules = [
        ModuleRecord(module, frozenset(vars(module)), hook_keys(module), type(module._parameters),
                     {name: buffer.dtype for name, buffer in module._buffers.items() if buffer is not None})
        for module in root.modules()
    ]
    parameters = [ParameterRecord(parameter, frozenset(vars(parameter)), parameter.dtype)
                  for parameter in root.parameters()]
    return Snapshot(modules, parameters)


def gather(recorded: Snapshot, deepspeed: Any) -> dict[int, torch.Tensor]:
    """The whole value of each parameter the run partitioned, by ``id``. Collective: call on every rank."""
    values: dict[int, torch.Tensor] = {}
    for record in recorded.parameters:
        parameter = record.parameter
        if hasattr(parameter, "ds_id") and not record.partitioned_before:
            with deepspeed.zero.GatheredParameters([parameter]):
                values[id(parameter)] = parameter.data.detach().clone()
    return values


def restore(recorded: Snapshot, values: dict[int, torch.Tensor]) -> None:
    """Remove what DeepSpeed added to the recorded modules and parameters; put the gathered values back."""
    for record in recorded.parameters:
        parameter = record.parameter
        if record.partitioned_before:
            continue
        for name in set(vars(parameter)) - record.attributes:
            delattr(parameter, name)
        value = values.get(id(parameter))
        with torch.no_grad():
            if value is not None:
                parameter.data = value
            if parameter.dtype != record.dtype:
                parameter.data = parameter.data.to(record.dtype)
    if any(record.partitioned_before for record in recorded.parameters):
        return  # the modules still hold partitions: DeepSpeed's hooks and attributes stay with them
    for module_record in recorded.modules:
        _restore_module(module_record)


def _restore_module(record: ModuleRecord) -> None:
    module = record.module
    remove_added(module, record.attributes, record.hooks)
    if type(module._parameters) is not record.parameters_type:
        module._parameters = record.parameters_type(module._parameters.items())
    with torch.no_grad():
        for name, dtype in record.buffer_dtypes.items():
            buffer = module._buffers.get(name)
            if buffer is not None and buffer.dtype != dtype:
                module._buffers[name] = buffer.to(dtype)


@attrs.frozen(eq=False)
class OptimizerRecord:
    """An optimizer before ``deepspeed.initialize``, which points its groups at ZeRO's flat fp32 partitions."""

    optimizer: torch.optim.Optimizer
    params: list[list[Any]]


def snapshot_optimizer(optimizer: torch.optim.Optimizer) -> OptimizerRecord:
    return OptimizerRecord(optimizer, [list(group["params"]) for group in optimizer.param_groups])


def restore_optimizer(record: OptimizerRecord) -> None:
    """Point the optimizer's groups at the module's parameters again; its state (kept for ZeRO's flat partitions,
    which are gone with the engine) is dropped: the strategy keeps ZeRO's own state for the next set-up."""
    for group, params in zip(record.optimizer.param_groups, record.params, strict=True):
        group["params"] = params
    record.optimizer.state.clear()
