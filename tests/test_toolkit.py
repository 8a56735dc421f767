"""core.toolkit is a bottom layer: each public name is imported once from the module that defines it, the top
level stays free of torch, and each name that moved to a submodule still resolves, with a warning naming its home."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        _ = core.toolkit.nothing_here


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
    metadata, copied_metadata = state._metadata, copied._metadata  # type: ignore[attr-defined]
    assert copied_metadata == metadata and copied_metadata is not metadata
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


# ------------------------------------------------------------------------------------------ outside engines


@pytest.fixture
def engines_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path where a test writes the engine modules it imports (real modules, real imports)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("fake_engine_")]:
        del sys.modules[name]


def test_a_missing_engine_names_the_error_and_the_install_command(engines_path: Path) -> None:
    engine = core.toolkit.OptionalEngine("fake_engine_absent", title="Absent", install="pip install absent",
                                         used_by="strategy='absent'")
    assert engine.unavailable_reason() == (
        "Absent is not importable (ModuleNotFoundError: No module named 'fake_engine_absent'); "
        "install it: pip install absent"
    )
    with pytest.raises(core.PluginUnavailableError, match=r"^strategy='absent' cannot run: Absent is not importable"):
        engine.load()


def test_an_old_engine_is_refused_a_development_build_and_a_new_one_load(engines_path: Path) -> None:
    (engines_path / "fake_engine_old.py").write_text("__version__ = '2.8.1'\n")
    (engines_path / "fake_engine_dev.py").write_text("__version__ = 'not-a-version'\n")
    (engines_path / "fake_engine_new").mkdir()
    (engines_path / "fake_engine_new" / "__init__.py").write_text("__version__ = '2.10'\n")
    (engines_path / "fake_engine_new" / "part.py").write_text("VALUE = 7\n")

    def engine(module: str) -> core.toolkit.OptionalEngine:
        return core.toolkit.OptionalEngine(module, title="Eng", install="pip install 'eng>=2.9'",
                                           used_by="plugins=['eng']", plugin="core-eng", minimum="2.9")

    assert engine("fake_engine_old").unavailable_reason() == (
        "Eng 2.8.1 is older than 2.9, which core-eng needs; upgrade it: pip install 'eng>=2.9'"
    )
    assert engine("fake_engine_dev").unavailable_reason() is None
    assert engine("fake_engine_new").load().__version__ == "2.10"
    assert engine("fake_engine_new").submodule("part").VALUE == 7


def test_a_further_check_and_the_platform_are_asked_once(engines_path: Path) -> None:
    (engines_path / "fake_engine_checked.py").write_text("GLOO = False\n")
    asked: list[str] = []

    def no_gloo(module: Any) -> str | None:
        asked.append(module.__name__)
        return None if module.GLOO else "built without Gloo; rebuild it"

    engine = core.toolkit.OptionalEngine("fake_engine_checked", title="Checked", install="x", used_by="u",
                                         check=no_gloo)
    assert engine.unavailable_reason() == engine.unavailable_reason() == "built without Gloo; rebuild it"
    assert asked == ["fake_engine_checked"]
    elsewhere = core.toolkit.OptionalEngine("fake_engine_checked", title="P2P", install="x", used_by="u",
                                            platforms=("plan9",), platform_reason="its daemon is built for it only")
    assert elsewhere.unavailable_reason() == (
        f"P2P runs on plan9 only (its daemon is built for it only), and this is {sys.platform!r}"
    )


def test_require_accelerator_returns_when_usable_and_names_the_way_out_when_not() -> None:
    core.toolkit.require_accelerator("cuda", "core-cuda", None)
    with pytest.raises(core.PluginUnavailableError) as raised:
        core.toolkit.require_accelerator("cuda", "core-cuda", "no CUDA device is visible")
    assert str(raised.value) == (
        "The accelerator 'cuda' (core-cuda) is installed but cannot run here: no CUDA device is visible. Use "
        "accelerator='cpu', or accelerator='auto' to take the best one available; python -m core.plugins --check "
        "shows what is usable."
    )


def test_raise_if_mismatched_counts_missing_keys_only_when_strict_and_agrees_in_number() -> None:
    from core.toolkit.checkpoint import raise_if_mismatched

    raise_if_mismatched("The weights 'w'", "the files", "Linear", wrong=[], absent=["a"], extra=[], strict=False)
    with pytest.raises(core.CheckpointError) as raised:
        raise_if_mismatched(
            "The weights 'w'", "the files", "Linear",
            wrong=[], absent=["a", "b", "c"], extra=["z"], strict=True, shown=2, plural=True,
        )
    assert str(raised.value) == (
        "The weights 'w' do not fit the Linear: 3 key(s) the module has and the files lack: ['a', 'b']; "
        "1 key(s) the files have and the module lacks: ['z']. Build the module as it was when saved, or load with "
        "strict=False."
    )
    with pytest.raises(core.CheckpointError, match=r"^The checkpoint 'c' does not fit the Linear: 1 tensor\(s\) "
                       r"of another shape: w: \(1,\) vs \(2,\)\. Build the module as it was when saved\.$"):
        raise_if_mismatched("The checkpoint 'c'", "the checkpoint", "Linear",
                            wrong=["w: (1,) vs (2,)"], absent=[], extra=[], strict=False)


def test_set_rendezvous_exports_address_and_port_and_restore_undoes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "before")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    exported = core.toolkit.ExportedVariables()
    exported.set_rendezvous("10.0.0.1", 29511)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.0.0.1", "29511")
    exported.restore()
    assert os.environ["MASTER_ADDR"] == "before" and "MASTER_PORT" not in os.environ


def test_quieted_holds_a_logger_at_the_level_for_the_block_and_restores_it(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    engine = logging.getLogger("core-test-engine")
    engine.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger="core-test-engine"), core.toolkit.quieted("core-test-engine"):
        engine.warning("expected here")
        engine.error("news")
    assert [record.getMessage() for record in caplog.records] == ["news"]
    assert engine.level == logging.INFO
    with pytest.raises(RuntimeError), core.toolkit.quieted(engine, logging.CRITICAL):  # restored after an error too
        raise RuntimeError
    assert engine.level == logging.INFO
