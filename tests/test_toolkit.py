"""core.toolkit is a bottom layer: each public name is imported once from the module that defines it, the top
level stays free of torch, and each name that moved to a submodule still resolves, with a warning naming its home."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest

import core
import core.toolkit

# What core.toolkit may lean on: itself and the layers below it (CONTRIBUTING.md, "Map of the code").
BELOW_OR_AT_TOOLKIT = ("core.toolkit", "core.registry", "core._")

# The deprecated aliases of two Trainer objects point up, to core.module: they were public here once, and the
# compatibility policy keeps an old path working for a deprecation period. Nothing in core uses these paths.
UPWARD_ALIASES = {"StatefulList", "StepModule"}


def _defined_in(value: object) -> str:
    module = inspect.getmodule(value)
    return module.__name__ if module is not None else ""


def test_every_public_name_resolves_without_a_warning_and_comes_from_the_bottom_layers() -> None:
    for name in core.toolkit.__all__:
        value = getattr(core.toolkit, name)
        if callable(value):
            assert _defined_in(value).startswith(BELOW_OR_AT_TOOLKIT), (name, _defined_in(value))
    assert set(core.toolkit.__all__) <= set(vars(core.toolkit)), "every public name is a real attribute, not lazy"
    assert not set(core.toolkit.__all__) & set(core.toolkit.MOVED)


def test_the_toolkit_imports_no_torch_and_nothing_of_the_layers_above() -> None:
    code = (
        "import sys, core.toolkit; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('core.builtin', 'core.lite', "
        "'core.trainer', 'core.module', 'core_'))))"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONWARNINGS": "error"})
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(core.toolkit.MOVED))
def test_a_moved_name_resolves_with_a_warning_naming_its_new_home(name: str) -> None:
    home = core.toolkit.MOVED[name]
    with pytest.warns(core.CoreDeprecationWarning, match=rf"core\.toolkit\.{name} moved to {home}\.{name}"):
        value = getattr(core.toolkit, name)
    assert value is getattr(importlib.import_module(home), name)
    assert name in importlib.import_module(home).__all__
    if name not in UPWARD_ALIASES:
        assert home.startswith("core.toolkit."), home
        if callable(value):
            assert _defined_in(value).startswith(BELOW_OR_AT_TOOLKIT), (name, _defined_in(value))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"module 'core\.toolkit' has no attribute 'nothing_here'"):
        _ = core.toolkit.nothing_here  # type: ignore[attr-defined]


@pytest.mark.parametrize("module", ["core.toolkit.tensors", "core.toolkit.checkpoint"])
def test_the_submodules_only_reexport(module: str) -> None:
    imported = importlib.import_module(module)
    for name in imported.__all__:
        assert _defined_in(getattr(imported, name)).startswith("core.toolkit._") or not callable(
            getattr(imported, name)
        )


# ------------------------------------------------------------------------------------- the one tensor walker


def test_the_walker_keeps_a_state_dicts_metadata_and_loads_back_into_the_module() -> None:
    import torch

    from core.toolkit.tensors import apply_to_tensors

    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    state = module.state_dict()
    copied = apply_to_tensors(state, lambda tensor: tensor.clone() + 1)
    assert type(copied) is type(state)
    assert copied._metadata == state._metadata and copied._metadata is not state._metadata
    assert torch.equal(copied["0.weight"], state["0.weight"] + 1)
    module.load_state_dict(copied)  # reads _metadata (the batch norm's version)


def test_the_walker_maps_a_tensor_reachable_twice_once_and_keeps_containers() -> None:
    import collections

    import torch

    from core.toolkit.tensors import apply_to_tensors

    pair = collections.namedtuple("pair", "left right")
    shared = torch.ones(2)
    calls: list[torch.Tensor] = []

    def double(tensor: torch.Tensor) -> torch.Tensor:
        calls.append(tensor)
        return tensor * 2

    result = apply_to_tensors({"a": shared, "b": pair(shared, [torch.zeros(1), "text", 3])}, double)
    assert len(calls) == 2  # shared once, the zeros once
    assert result["a"] is result["b"].left and isinstance(result["b"], pair)
    assert result["b"].right[1:] == ["text", 3] and torch.equal(result["a"], torch.full((2,), 2.0))
