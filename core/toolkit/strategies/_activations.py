"""Activation checkpointing: which submodules recompute their activations in backward instead of keeping them.

A checkpointed submodule keeps only its inputs during forward; backward runs its forward again to get what it needs.
That trades compute (about one more forward of those modules per step) for memory (their activations, most of a
transformer's): the first lever to pull when a model does not fit.

Each chosen module's ``forward`` becomes its class's forward run under ``torch.utils.checkpoint.checkpoint``
(non-reentrant), set on the instance: no wrapper module, so parameter names and state-dict keys stay exactly what
they are without it (no ``_checkpoint_wrapped_module.`` as Lightning's wrapper adds), and a checkpoint written with
it loads without it, and back. Strategies apply it at set-up, before they wrap, shard or compile the model.

Why not torch's composable ``checkpoint`` (``torch.distributed._composable``), which also keeps the keys: it works
through forward hooks, and a model compiled whole with ``torch.compile`` then fails in backward on torch 2.13
("Recomputed values for the following tensors have different metadata than during the forward pass"), where
``torch.utils.checkpoint`` inside the forward is traced by dynamo as one higher-order operation and compiles. A
module that already carries the composable checkpoint (applied by the user) is left as it is.

The policy takes what Lightning's ``activation_checkpointing_policy`` takes, and torchtitan's layer-selective form:

- a set (or list, tuple) of module classes, or one class: every submodule that is an instance of one of them;
- a function ``module -> bool``; Lightning's FSDP1-style ``fn(module, recurse, nonwrapped_numel) -> bool`` (such as
  ``functools.partial(size_based_auto_wrap_policy, ...)``) is called with ``recurse=False`` and the module's
  parameter count;
- :class:`EveryNth` ``(policy, n)``: every ``n``-th submodule that ``policy`` matches, counted in the order of
  ``module.modules()`` from 1 (torchtitan's ``selective_ac_option="n"``: blocks ``n``, ``2n``, ...).

Only the outermost match is checkpointed: a matching submodule inside a checkpointed one is recomputed with it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TypeAlias

import attrs
import torch

from core._errors import ConfigurationError


def _classes_or_none(policy: object) -> tuple[type[torch.nn.Module], ...] | None:
    if isinstance(policy, type) and issubclass(policy, torch.nn.Module):
        return (policy,)
    if isinstance(policy, (set, frozenset, list, tuple)):
        return tuple(policy)
    return None


@attrs.frozen
class EveryNth:
    """Checkpoint every ``n``-th submodule that ``policy`` matches (torchtitan's layer-selective checkpointing):
    ``EveryNth({Block}, 2)``."""

    policy: Collection[type[torch.nn.Module]] | type[torch.nn.Module] | Callable[..., bool]
    """Module classes or a function ``module -> bool``, as for ``activation_checkpointing_policy``."""
    n: int = attrs.field()
    """``1`` checkpoints every match; ``2`` the 2nd, 4th, ... (about half the activations kept)."""

    @n.validator
    def _check_n(self, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(
                f"EveryNth(n={value!r}): expected a whole number >= 1 (1 checkpoints every match)."
            )


ActivationCheckpointingPolicy: TypeAlias = (
    Collection[type[torch.nn.Module]] | type[torch.nn.Module] | Callable[..., bool] | EveryNth | None
)
"""What ``activation_checkpointing_policy`` takes: module classes, a predicate, :class:`EveryNth`, or ``None``."""

_EXPECTED = (
    "expected a set of module classes ({Block}), a function module -> bool, EveryNth(policy, n) for every n-th match, "
    "or None"
)


def _takes_fsdp1_arguments(function: Callable[..., bool]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called with the module alone
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in parameters if p.kind in kinds and p.default is p.empty]
    return len(positional) >= 3


def _predicate(owner: str, policy: object) -> Callable[[torch.nn.Module], bool]:
    classes = _classes_or_none(policy)
    if classes is not None:
        bad = [item for item in classes if not (isinstance(item, type) and issubclass(item, torch.nn.Module))]
        if bad or not classes:
            raise ConfigurationError(
                f"{owner}(activation_checkpointing_policy={policy!r}): {_EXPECTED}; got {bad or 'no classes'}."
            )
        return lambda module: isinstance(module, classes)
    if callable(policy) and not isinstance(policy, type):
        function = policy
        if _takes_fsdp1_arguments(function):  # Lightning's FSDP1 auto-wrap form: (module, recurse, nonwrapped_numel)
            return lambda module: bool(function(module, False, sum(p.numel() for p in module.parameters())))
        return lambda module: bool(function(module))
    raise ConfigurationError(f"{owner}(activation_checkpointing_policy={policy!r}) is not a policy: {_EXPECTED}.")


def check_activation_checkpointing_policy(
    owner: str, policy: ActivationCheckpointingPolicy
) -> ActivationCheckpointingPolicy:
    """Return ``policy`` if it is one (see the module's documentation), else raise naming ``owner`` and the forms.

    :raises core.ConfigurationError: ``policy`` is none of the accepted forms (an integer, a string, a class that is
        not a module, ...).
    """
    if policy is None:
        return None
    if isinstance(policy, (bool, int, float, str)):
        raise ConfigurationError(f"{owner}(activation_checkpointing_policy={policy!r}) is not a policy: {_EXPECTED}.")
    _predicate(owner, policy.policy if isinstance(policy, EveryNth) else policy)
    return policy


def _outermost(module: torch.nn.Module, wants: Callable[[torch.nn.Module], bool]) -> Iterator[torch.nn.Module]:
    if wants(module):
        yield module
        return
    for child in module.children():
        yield from _outermost(child, wants)


def checkpointed_modules(
    module: torch.nn.Module, policy: ActivationCheckpointingPolicy, owner: str = "activation checkpointing"
) -> list[torch.nn.Module]:
    """The submodules of ``module`` (itself included) that ``policy`` selects, outermost matches only, in order."""
    if policy is None:
        return []
    every = policy.n if isinstance(policy, EveryNth) else 1
    wants = _predicate(owner, policy.policy if isinstance(policy, EveryNth) else policy)
    matches = list(_outermost(module, wants))
    return [match for number, match in enumerate(matches, start=1) if number % every == 0]


_MARK = "_core_checkpointed"


def is_checkpointed(module: torch.nn.Module) -> bool:
    """Whether ``module`` recomputes its activations: :func:`checkpoint_activations` or torch's composable
    ``checkpoint`` was applied to it."""
    if getattr(module.__dict__.get("forward"), _MARK, False):
        return True
    from torch.distributed._composable.contract import _get_registry

    registry = _get_registry(module)
    return registry is not None and "checkpoint" in registry


def _checkpoint(module: torch.nn.Module) -> None:
    from torch.utils.checkpoint import checkpoint

    # The class's forward, not the instance's: a partial holding the module pickles and deep-copies with it.
    forward = functools.partial(checkpoint, type(module).forward, module, use_reentrant=False)
    setattr(forward, _MARK, True)
    module.forward = forward


def checkpoint_activations(
    module: torch.nn.Module, policy: ActivationCheckpointingPolicy, owner: str = "activation checkpointing"
) -> list[torch.nn.Module]:
    """Make the submodules ``policy`` selects recompute their activations in backward; returns them.

    Parameter names and state-dict keys do not change. A submodule already checkpointed (a module set up by an
    earlier run, or by the user) is left as it is, so applying the same policy twice changes nothing. Call it before
    the model is wrapped, sharded or compiled.

    :raises core.ConfigurationError: ``policy`` is not a policy (``owner`` names who was given it).
    """
    chosen = checkpointed_modules(module, policy, owner)
    for submodule in chosen:
        if not is_checkpointed(submodule):
            _checkpoint(submodule)
    return chosen


@contextmanager
def saved_tensor_bytes() -> Iterator[list[int]]:
    """Count the bytes autograd saves for backward inside the block: ``with saved_tensor_bytes() as saved: loss =
    model(x)``, then ``saved[0]``. What activation checkpointing removes: inside a checkpointed module its own hooks
    take over and keep nothing but the module's input. A ``DTensor`` counts its local part.
    """
    total = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total[0] += local.numel() * local.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield total
