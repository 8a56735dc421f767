"""Helpers for precisions that change a model's layers (float8 training, 4-bit and 8-bit weights).

A *structural* precision replaces some ``nn.Linear`` layers of the user's model with its own layer classes in
``precision_convert_module``. What the runtime does for it (see docs/precision.md, "Writing a precision"):
``Lite`` hands it the user's model (never the Trainer's step wrapper), converts each model once, re-points
optimizers made before setup at parameters the conversion replaced (as
:class:`core.toolkit.strategies.ReplacedParameters` does for sharding strategies; parameters must keep their names),
and asks it to turn state dicts into their plain form on save and back on load (``precision_module_state_to_save``
and ``precision_module_state_to_load``).

What it does itself, with these helpers: :class:`LinearFilter` chooses the layers to convert (dimensions divisible
by a multiple, a minimum size, the output head and named layers left out); :func:`swap_linear_layers` replaces the
chosen layers in place and returns their fully-qualified names; :func:`layers_of_type` finds the converted layers
again (for the state-dict hooks), by name, as their state-dict keys are prefixed. For the forward pass:
:func:`default_dtype` (a context making a dtype torch's default) and :func:`floating_to` (a batch's or an output's
floating tensors in a dtype, the rest untouched).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import torch

from core._checks import check_whole
from core._errors import ConfigurationError

__all__ = ["LinearFilter", "alias_factory", "default_dtype", "floating_to", "layers_of_type", "swap_linear_layers"]

_Layer = TypeVar("_Layer", bound=torch.nn.Module)
_Plugin = TypeVar("_Plugin")


def _check_patterns(instance: LinearFilter, attribute: attrs.Attribute[tuple[str, ...]], value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(
            f"LinearFilter({attribute.name}={value!r}): expected fully-qualified layer names or glob patterns "
            f"(strings, like 'lm_head' or 'blocks.*.attn.proj')."
        )


def _as_patterns(value: object) -> object:
    if isinstance(value, str):
        return (value,)
    return tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else value


@attrs.frozen
class LinearFilter:
    """Which ``nn.Linear`` layers of a model a structural precision converts.

    ``LinearFilter(min_weight_elements=1 << 20, exclude=("lm_head",))``: each field below is an argument.
    """

    divisible_by: int = attrs.field(default=16, validator=lambda _, a, v: check_whole("LinearFilter", a.name, v, 1))
    """Both dimensions must be multiples of it (float8 matrix multiplications need 16)."""
    min_weight_elements: int = attrs.field(
        default=0, validator=lambda _, a, v: check_whole("LinearFilter", a.name, v, 0)
    )
    """A layer with fewer weights (``in_features * out_features``) is left as it is: for small matrices the conversion
    costs more than the faster multiplication saves (torchtitan's rule leaves out layers below about a million
    weights for the same reason). ``0`` converts every size."""
    skip_output_head: bool = True
    """Leave out the model's last ``nn.Linear`` (the output head, whose precision matters most for the loss)."""
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_as_patterns, validator=_check_patterns)
    """Fully-qualified names (``model.named_modules()`` names) or glob patterns of layers to leave."""
    include: Callable[[torch.nn.Module, str], bool] | None = None
    """A function ``(module, fully_qualified_name) -> bool`` that must also say ``True``, for any other rule."""

    def chosen(self, model: torch.nn.Module) -> list[str]:
        """The fully-qualified names of the layers of ``model`` this filter converts, in module order."""
        linears = [(name, layer) for name, layer in model.named_modules() if type(layer) is torch.nn.Linear]
        head = linears[-1][0] if self.skip_output_head and linears else None
        return [name for name, layer in linears if name != head and self.accepts(layer, name)]

    def accepts(self, layer: torch.nn.Module, name: str) -> bool:
        """Whether ``layer`` (named ``name`` in its model) passes every rule but the output-head one."""
        if not isinstance(layer, torch.nn.Linear):
            return False
        rows, columns = layer.weight.shape
        if rows % self.divisible_by or columns % self.divisible_by:
            return False
        if rows * columns < self.min_weight_elements:
            return False
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.exclude):
            return False
        return self.include is None or bool(self.include(layer, name))


def swap_linear_layers(
    model: torch.nn.Module, names: Collection[str], build: Callable[[torch.nn.Linear, str], torch.nn.Module]
) -> list[str]:
    """Replace the ``nn.Linear`` layers of ``model`` named in ``names`` by ``build(layer, name)``, in place.

    :param names: Fully-qualified names, as :meth:`LinearFilter.chosen` returns them. The model itself (name
        ``""``) cannot be swapped in place and is refused.
    :param build: Makes the replacement. Its parameters should keep the names ``weight`` and ``bias`` so that
        optimizers made before setup are re-pointed and checkpoints keep their keys.
    :return: The names swapped, in the order given.
    """
    if "" in names:
        raise ConfigurationError(
            f"The model itself is a {type(model).__name__}, which a precision cannot replace in place; wrap it in a "
            f"container module (torch.nn.Sequential(model)) to convert it."
        )
    modules = dict(model.named_modules())
    swapped = []
    for name in names:
        layer = modules.get(name)
        if not isinstance(layer, torch.nn.Linear):
            raise ConfigurationError(f"The model has no nn.Linear named {name!r} to convert.")
        parent_name, _, child = name.rpartition(".")
        setattr(modules[parent_name], child, build(layer, name))
        swapped.append(name)
    return swapped


def layers_of_type(model: torch.nn.Module, layer_type: type[_Layer]) -> Iterator[tuple[str, _Layer]]:
    """``(name, layer)`` for every submodule of ``model`` that is a ``layer_type``; ``name`` prefixes its state keys."""
    for name, layer in model.named_modules():
        if isinstance(layer, layer_type):
            yield name, layer


def alias_factory(plugin_class: Callable[..., _Plugin], alias: str, doc: str) -> Callable[..., _Plugin]:
    """The entry point's factory for one alias of a precision class that takes its mode first.

    ``nf4 = alias_factory(BitsandbytesPrecision, "nf4", "...")`` makes ``nf4(**options)``, which returns
    ``BitsandbytesPrecision("nf4", **options)``: the entry point ``"nf4" = "core_bitsandbytes:nf4"`` names it, and
    a user passes it options (``precision=nf4(exclude=("lm_head",))``). It is named after the alias (``-`` as
    ``_``: ``fp8_rowwise``), as listings and errors show it, and ``doc`` is its docstring.
    """

    def make(**options: Any) -> _Plugin:
        return plugin_class(alias, **options)

    make.__name__ = make.__qualname__ = alias.replace("-", "_")
    make.__doc__ = doc
    return make


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make ``dtype`` the default for new floating tensors, restoring the previous one on exit."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def floating_to(data: Any, dtype: torch.dtype | None = None) -> Any:
    """``data`` (a tensor or nested collection) with its floating tensors in ``dtype`` (default: torch's default
    dtype now, what ``precision_convert_output`` gives back); integer tensors and other values unchanged."""
    from core.toolkit.tensors import apply_to_tensors

    target = torch.get_default_dtype() if dtype is None else dtype
    return apply_to_tensors(data, lambda tensor: tensor.to(target) if torch.is_floating_point(tensor) else tensor)
