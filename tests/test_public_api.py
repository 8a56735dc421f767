"""Plugins use only core's public API: import-linter's contract, and the same rule over their tests."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.testing.import_contracts import is_private

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = sorted([*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("contrib/*/pyproject.toml")])
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11


def package_names() -> list[str]:
    return sorted(
        init.parent.name for pyproject in DISTRIBUTIONS for init in pyproject.parent.glob("core_*/__init__.py")
    )


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute imports), with its line: ``from a.b import c`` gives a.b and a.b.c."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_is_private() -> None:
    assert is_private("core._errors") and is_private("core.toolkit._storage") and is_private("core_ddp._strategy")
    assert is_private("core.builtin") and is_private("core.builtin.strategies")
    assert not is_private("core") and not is_private("core.toolkit") and not is_private("core_ddp")
    assert not is_private("core.testing.import_contracts") and not is_private("core.__version__")


def test_the_import_linter_config_lists_every_distributions_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["root_packages"] == ["core", *package_names()], (
        "add the new package to [tool.importlinter] root_packages in pyproject.toml"
    )
    below_lite = [contract for contract in config["contracts"] if contract["type"] == "forbidden"]
    assert [contract["source_modules"] for contract in below_lite] == [package_names()], (
        "add the new package to the source_modules of the 'Plugins sit below Lite' contract in pyproject.toml"
    )
    assert below_lite[0]["forbidden_modules"] == [
        "core.lite", "core.module", "core.trainer", "core.callbacks", "core.loggers", "core.fault_tolerance",
    ]


def test_the_contracts_hold_for_this_repository() -> None:
    finished = subprocess.run([str(LINT_IMPORTS)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "Plugins import only public names of core and of other plugins KEPT" in finished.stdout
    assert "Plugins sit below Lite" in finished.stdout


def test_a_private_import_fails_lint_imports_naming_the_import_and_its_line(tmp_path: Path) -> None:
    package = tmp_path / "core_careless"
    package.mkdir()
    (package / "__init__.py").write_text("from core_careless import _own\n")
    (package / "_own.py").write_text(textwrap.dedent("""\
        import core
        from core.toolkit.tensors import apply_to_tensors
        from core._errors import CoreError
        from core_ddp._strategy import DDPStrategy
        from core.builtin.strategies import SingleDeviceStrategy
    """))
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""\
        [importlinter]
        root_packages =
            core
            core_ddp
            core_careless
        contract_types =
            public_api: core.testing.import_contracts.PublicApiContract

        [importlinter:contract:public]
        name = Careless plugin
        type = public_api
    """))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    finished = subprocess.run([str(LINT_IMPORTS), "--config", str(tmp_path / ".importlinter")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=environment)
    assert finished.returncode == 1, finished.stdout
    assert "Careless plugin BROKEN" in finished.stdout
    assert "- core_careless._own -> core._errors (l.3)" in finished.stdout
    assert "- core_careless._own -> core_ddp._strategy (l.4)" in finished.stdout
    assert "- core_careless._own -> core.builtin.strategies (l.5)" in finished.stdout
    assert "-> core.toolkit" not in finished.stdout and "-> core (" not in finished.stdout  # public: allowed
    assert "core_careless.__init__ ->" not in finished.stdout  # its own private module: allowed


@pytest.mark.parametrize("pyproject", DISTRIBUTIONS, ids=lambda path: path.parent.name)
def test_no_file_of_a_distribution_imports_a_private_module_of_another_package(pyproject: Path) -> None:
    """Sources, tests and test scripts alike (import-linter sees only the packages)."""
    own = {init.parent.name for init in pyproject.parent.glob("core_*/__init__.py")}
    offending = []
    for path in sorted(pyproject.parent.rglob("*.py")):
        if ".egg-info" in str(path) or "build" in path.parts:
            continue
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if (top == "core" or top.startswith("core_")) and top not in own and is_private(module):
                offending.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not offending, "private imports:\n" + "\n".join(offending)


def test_plugins_that_build_on_another_plugin_declare_it() -> None:
    for pyproject in DISTRIBUTIONS:
        dependencies = " ".join(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
        own = {init.parent.name for init in pyproject.parent.glob("core_*/__init__.py")}
        used = {
            module.split(".")[0]
            for path in pyproject.parent.glob("core_*/**/*.py")
            for _, module in imported_modules(path)
            if module.startswith("core_") and module.split(".")[0] not in own
        }
        for package in sorted(used):
            distribution = package.replace("_", "-")
            assert distribution in dependencies, f"{pyproject.parent.name} imports {package} but does not depend on it"


@pytest.mark.parametrize("kind", ["accelerator", "strategy", "precision", "environment", "checkpoint_io", "extension"])
def test_the_plugin_template_uses_only_public_names(tmp_path: Path, kind: str) -> None:
    target = tmp_path / f"core-mine-{kind}"
    subprocess.run([sys.executable, "-m", "core.plugins", "new", kind, "mine", "--directory", str(target)],
                   check=True, capture_output=True, text=True, timeout=60)
    files = sorted(target.rglob("*.py"))
    assert files
    private = [f"{path.name}:{line}: {module}" for path in files for line, module in imported_modules(path)
               if module.split(".")[0].startswith("core") and is_private(module) and not module.startswith("core_mine")]
    assert private == []


def test_no_plugin_file_names_a_private_module_by_its_absolute_path() -> None:
    """A plugin reaches its own private modules relatively (``from ._strategy import ...``) and nothing else private:
    no import line under plugins/ or contrib/, sources and tests alike, names ``core._*``, ``core.builtin`` or
    ``core_<name>._*`` (which an outside author copying the file would take as importable)."""
    pattern = re.compile(r"^\s*(from|import)\s+(core\._|core\.builtin|core_[a-z0-9_]+\._)")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for top in ("plugins", "contrib")
        for path in sorted((ROOT / top).rglob("*.py"))
        if ".egg-info" not in str(path)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.match(line)
    ]
    assert found == [], "import through the package's public names or relatively:\n" + "\n".join(found)
