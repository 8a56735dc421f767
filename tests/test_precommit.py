"""The pre-commit configuration runs the project's own checks, and each hook fails on what it should catch."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def _run(hook: dict[str, Any], *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*shlex.split(hook["entry"]), *map(str, files)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_hooks_are_the_ones_make_test_runs_and_their_programs_exist() -> None:
    hooks = _hooks()
    assert set(hooks) == {"ruff", "ruff-format", "mypy", "lint-imports"}
    for hook in hooks.values():
        program = ROOT / shlex.split(hook["entry"])[0]
        assert program.is_file(), f"{hook['id']}: {program} does not exist (run make setup)"
    assert hooks["lint-imports"]["pass_filenames"] is False


@pytest.mark.parametrize(
    ("path", "checked"),
    [
        ("core/toolkit/_collections.py", True),
        ("plugins/core-ddp/core_ddp/_strategy.py", True),
        ("contrib/core-ray/core_ray/_launcher.py", True),
        ("bench/__main__.py", True),
        ("tests/test_toolkit.py", False),
        ("plugins/core-ddp/tests/test_ddp.py", False),
    ],
)
def test_mypy_runs_on_the_packages_not_on_test_directories(path: str, checked: bool) -> None:
    assert bool(re.search(_hooks()["mypy"]["files"], path)) is checked


def test_ruff_and_mypy_fail_on_a_bad_file_and_pass_a_good_one(tmp_path: Path) -> None:
    hooks = _hooks()
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef count() -> int:\n    return 'many'\n")
    good = tmp_path / "good.py"
    good.write_text("def count() -> int:\n    return 3\n")
    ruff = _run(hooks["ruff"], bad)
    assert ruff.returncode == 1 and "F401" in ruff.stdout
    mypy = _run(hooks["mypy"], bad)
    assert mypy.returncode == 1 and 'Incompatible return value type (got "str", expected "int")' in mypy.stdout
    assert _run(hooks["ruff"], good).returncode == 0
    assert _run(hooks["mypy"], good).returncode == 0
    formatted = _run(hooks["ruff-format"], good)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
