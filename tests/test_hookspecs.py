"""The hook contract is the reference documentation: every hook is complete and consistent."""

from __future__ import annotations

import inspect

import pytest

from core import hookspecs
from core._markers import PROJECT_NAME
from core._records import KINDS

HOOKS = sorted(
    name
    for name, value in vars(hookspecs).items()
    if inspect.isfunction(value) and hasattr(value, f"{PROJECT_NAME}_spec")
)


def test_every_kind_has_hooks() -> None:
    prefixes = {name.split("_")[0] for name in HOOKS}
    assert {"accelerator", "strategy", "precision", "environment", "checkpoint"} <= prefixes
    assert len(HOOKS) >= 40


@pytest.mark.parametrize("name", HOOKS)
def test_hook_docstring_is_complete(name: str) -> None:
    function = getattr(hookspecs, name)
    doc = inspect.getdoc(function) or ""
    summary = doc.splitlines()[0] if doc else ""
    assert summary.endswith("."), f"{name}: the first line is a one-sentence summary"
    for parameter in inspect.signature(function).parameters:
        assert f":param {parameter}:" in doc, f"{name} does not document {parameter}"
    assert "Implemented by" in doc, f"{name} does not say who implements it"
    assert "Called" in doc, f"{name} does not say when it is called"
    if inspect.signature(function).return_annotation not in ("None", None):
        assert ":return:" in doc, f"{name} does not document its return value"
    firstresult = getattr(function, f"{PROJECT_NAME}_spec")["firstresult"]
    assert firstresult == ("Stops at first non-None result." in doc), f"{name}: firstresult sentence mismatch"


@pytest.mark.parametrize("name", HOOKS)
def test_hooks_of_a_kind_are_firstresult(name: str) -> None:
    firstresult = getattr(getattr(hookspecs, name), f"{PROJECT_NAME}_spec")["firstresult"]
    assert firstresult == (name != "core_attach")


def test_required_hooks_exist_and_belong_to_their_kind() -> None:
    assert set(hookspecs.REQUIRED_HOOKS) == set(KINDS)
    for kind, names in hookspecs.REQUIRED_HOOKS.items():
        for name in names:
            assert name in HOOKS and name.startswith(f"{kind}_")


def test_importing_the_spec_loads_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, core.hookspecs; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
