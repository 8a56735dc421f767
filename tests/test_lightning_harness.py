"""scripts/lightning_tests.py's parts that need no Lightning checkout: lazy imports, the alias, the table."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS / "lightning_harness"))
sys.path.insert(0, str(SCRIPTS))

# scripts, not packages: loaded by path (an import statement would send mypy looking for them)
support: Any = importlib.import_module("lightning_harness_support")
lightning_tests: Any = importlib.import_module("lightning_tests")


def test_module_level_imports_become_lazy_and_keep_line_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    source = (
        "from __future__ import annotations\n"
        "import os\n"
        "from json import (\n"
        "    dumps,\n"
        "    no_such_name,\n"
        ")\n"
        "def f():\n"
        "    import sys\n"
        "    return sys\n"
    )
    rewritten = support.make_imports_lazy(source)
    assert rewritten.count("\n") == source.count("\n")
    assert rewritten.splitlines()[0] == "from __future__ import annotations"
    assert "    import sys" in rewritten  # only module-level statements change
    # the rewritten imports reach the support module through the pytest plugin module the harness writes
    plugin = types.SimpleNamespace(lightning_harness_support=support)
    monkeypatch.setitem(sys.modules, "lightning_harness_plugin", plugin)
    namespace: dict[str, Any] = {"__name__": "lazy_example"}
    exec(compile(rewritten, "lazy_example.py", "exec"), namespace)
    assert namespace["dumps"].__module__ == "json"
    refused = namespace["no_such_name"]
    assert not refused and "refused import" in repr(refused)
    with pytest.raises(ImportError, match="module-level `from json import no_such_name` failed"):
        refused()
    with pytest.raises(ImportError):
        refused.MEMBER()  # attribute access defers; a call raises


def test_the_alias_makes_lightning_modules_core_lightning_modules() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(SCRIPTS / 'lightning_harness')!r}); "
        "import lightning_harness_support as support; support.install_alias(); "
        "import lightning.pytorch as pl, lightning_fabric, core.lightning.pytorch; "
        "from lightning.pytorch.callbacks import EarlyStopping; import core.callbacks; "
        "print(pl is core.lightning.pytorch, pl.__spec__.name, EarlyStopping is core.callbacks.EarlyStopping, "
        "lightning_fabric is sys.modules['core.lightning.fabric'])"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert finished.stdout.split() == ["True", "core.lightning.pytorch", "True", "True"]


def test_the_table_leaves_not_applicable_tests_out_and_names_kept_ones() -> None:
    outcomes = [
        lightning_tests.Outcome("tests_x/test_a.py::test_ok[1]", "passed"),
        lightning_tests.Outcome("tests_x/test_a.py::test_ok[2]", "failed", "AssertionError"),
        lightning_tests.Outcome("tests_x/test_a.py::test_internal", "failed", "has no attribute '_results'"),
        lightning_tests.Outcome("tests_x/test_a.py::test_kept[cpu]", "failed", "CheckpointError"),
        lightning_tests.Outcome("tests_x/test_a.py::test_kept[cuda]", "skipped"),  # skipped: not a kept failure
        lightning_tests.Outcome("tests_x/test_a.py::test_skip", "skipped"),
    ]
    table = lightning_tests.table(outcomes, {"tests_x/test_a.py::test_internal": "internal"}, {
        "tests_x/test_a.py::test_kept": "on purpose"})
    assert "| tests_x/test_a.py | 1 | 2 | 1 | 2 | 1 | 33 % |" in table
    suggested = lightning_tests.suggest_not_applicable(outcomes, {})
    assert suggested == {"tests_x/test_a.py::test_internal": "reads Lightning's private attribute `_results`"}
