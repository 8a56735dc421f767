"""The plugin authors' pages (docs/writing-plugins.md, docs/tutorial-accelerator.md, docs/plugin-authors.md) against
the code: every core name they tell an author to import is public where they say it is, the conformance kit settings
they name exist, the import-linter example forbids what the project forbids, the auto priorities they quote are the
installed plugins' own, and the strategy kit runs as many tests as the page shows (issue 51)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest
from test_doc_blocks import ROOT, blocks_of

from core._records import ENTRY_POINT_GROUPS
from core.toolkit import MOVED

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11

PAGES = [ROOT / "docs" / name for name in ("writing-plugins.md", "tutorial-accelerator.md", "plugin-authors.md")]
DOTTED = re.compile(r"`(core(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
"""A backticked path that starts with ``core.``: its dotted part (``core.toolkit.strategies.optimizer_step``)."""


def _public_in(module: ModuleType, name: str) -> bool:
    """Whether ``name`` is a public name of ``module``: in its ``__all__`` where it has one."""
    if name.startswith("_"):
        return False
    exported = getattr(module, "__all__", None)
    return hasattr(module, name) if exported is None else name in exported


def _check_path(path: str) -> str | None:
    """Why the dotted ``path`` is not a public module or a public name of one; ``None`` when it is."""
    parts = path.split(".")
    if any(part.startswith("_") for part in parts):
        return f"{path}: a private part"
    try:
        importlib.import_module(path)
        return None
    except ModuleNotFoundError:
        pass
    parent = path.rpartition(".")[0]
    while parent:
        try:
            module = importlib.import_module(parent)
        except ModuleNotFoundError:
            parent, _, _ = parent.rpartition(".")
            continue
        attribute = path[len(parent) + 1:].split(".")
        if not _public_in(module, attribute[0]):
            return f"{path}: {attribute[0]!r} is not a public name of {parent}"
        return None
    return f"{path}: no such module"


def _imports(source: str) -> list[tuple[str, str]]:
    """``(module, name)`` of every ``from core... import name`` of a python block."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "core":
            found += [(node.module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_core_name_the_page_imports_or_names_is_public(page: Path) -> None:
    problems = []
    for block in blocks_of(page):
        if block.language == "python":
            for module_name, name in _imports(block.source):
                if any(part.startswith("_") for part in module_name.split(".")):
                    problems.append(f"{block.id}: from {module_name} import {name}: a private module")
                    continue
                if not _public_in(importlib.import_module(module_name), name):
                    problems.append(f"{block.id}: from {module_name} import {name}: not in {module_name}.__all__")
    groups = set(ENTRY_POINT_GROUPS.values())
    for path in sorted(set(DOTTED.findall(page.read_text()))):
        if path in groups:
            continue  # an entry-point group (core.strategies), not a module
        if path.rpartition(".")[0] == "core.toolkit" and path.rpartition(".")[2] in MOVED:
            continue  # an old path the page names as deprecated (it warns, naming the new one)
        problem = _check_path(path)
        if problem is not None:
            problems.append(problem)
    assert not problems, "\n".join(problems)


def test_the_names_plugin_authors_may_import_from_core_are_exported() -> None:
    import core

    text = (ROOT / "docs" / "plugin-authors.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `core` |"))
    names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", row.split("|")[2])
    assert {"hookimpl", "Supports", "ClusterInfo", "ActiveSet", "traits_of"} <= set(names), row
    assert [name for name in names if not _public_in(core, name)] == []


def test_the_kit_settings_the_pages_name_exist() -> None:
    import core.testing

    text = (ROOT / "docs" / "writing-plugins.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \|.*\| `(\w+Conformance)`: (.*) \|$", text, flags=re.MULTILINE)
    assert len(rows) == 6, rows
    missing = []
    for _, class_name, settings in rows:
        kit = getattr(core.testing, class_name)
        for setting in re.findall(r"`(\w+)`", settings):
            if not hasattr(kit, setting):
                missing.append(f"{class_name}.{setting}")
    # Named in the pages' prose: every kit class takes plugin_factory; the strategy kit step_precisions; the classes
    # that run a job (and the precision kit) the settings that point them at a device.
    for class_name in ("StrategyConformance", "AcceleratorConformance", "PrecisionConformance",
                       "EnvironmentConformance", "CheckpointIOConformance", "ExtensionConformance"):
        if not hasattr(getattr(core.testing, class_name), "plugin_factory"):
            missing.append(f"{class_name}.plugin_factory")
    expected = {"StrategyConformance": ("step_precisions", "equivalence_atol"),
                "DistributedRunConformance": ("accelerator", "devices", "job_timeout", "launcher"),
                "PrecisionConformance": ("accelerator", "strategies")}
    for class_name, settings in expected.items():
        missing += [f"{class_name}.{setting}" for setting in settings
                    if not hasattr(getattr(core.testing, class_name), setting)]
    # The tutorial's pairing classes set attributes their kit class has.
    for block in blocks_of(ROOT / "docs" / "tutorial-accelerator.md"):
        if block.language != "python":
            continue
        for node in ast.walk(ast.parse(block.source)):
            if isinstance(node, ast.ClassDef) and node.bases and isinstance(node.bases[0], ast.Name):
                base = getattr(core.testing, node.bases[0].id, None)
                if base is None:
                    continue
                for statement in node.body:
                    target = statement.targets[0] if isinstance(statement, ast.Assign) else None
                    if isinstance(target, ast.Name) and not hasattr(base, target.id):
                        missing.append(f"{block.id}: {node.bases[0].id}.{target.id}")
    assert not missing, missing


def test_the_import_linter_example_forbids_the_layers_the_project_forbids() -> None:
    example = next(
        tomllib.loads(block.source) for block in blocks_of(ROOT / "docs" / "plugin-authors.md")
        if block.language == "toml" and "importlinter" in block.source
    )["tool"]["importlinter"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden = [contract for contract in project["contracts"] if set(contract.get("forbidden_modules", ())) >= {
        "core.lite", "core.trainer"}]
    assert len(forbidden) == 1, forbidden
    shown = [contract for contract in example["contracts"] if contract["type"] == "forbidden"]
    assert len(shown) == 1 and shown[0]["forbidden_modules"] == forbidden[0]["forbidden_modules"], shown
    assert example["exclude_type_checking_imports"] is True  # core imports Lite and Trainer under TYPE_CHECKING
    assert example["contract_types"] == project["contract_types"]
    assert any(contract["type"] == "public_api" for contract in example["contracts"])


def test_the_auto_priorities_the_tutorial_quotes_are_the_installed_plugins() -> None:
    import core
    from core.registry._discovery import load

    text = (ROOT / "docs" / "tutorial-accelerator.md").read_text()
    chain = next(line for line in text.splitlines() if line.startswith("tpu (30) -> "))
    quoted = {alias: int(number) for alias, number in re.findall(r"(\w+) \((\d+)\)", chain)}
    quoted.pop("vdev")  # the tutorial's own plugin
    environments = dict(re.findall(r"(torchelastic|slurm) (\d+)", text))
    assert quoted == {"tpu": 30, "cuda": 20, "mps": 10, "cpu": 0} and set(environments) == {"torchelastic", "slurm"}
    catalog = core.discover()
    found = {alias: core.traits_of(load(catalog.lookup("accelerator", alias)), "accelerator").priority
             for alias in quoted}
    found_environments = {
        alias: str(core.traits_of(load(catalog.lookup("environment", alias)), "environment").priority)
        for alias in environments
    }
    assert (found, found_environments) == (quoted, environments)


def test_the_strategy_kit_runs_as_many_tests_as_the_page_shows() -> None:
    from core.testing import StrategyConformance

    text = (ROOT / "docs" / "writing-plugins.md").read_text()
    output = re.search(r"^(\.+) +\[100%\]\n(\d+) passed", text, flags=re.MULTILINE)
    assert output is not None, "writing-plugins.md no longer shows the kit's pytest output"
    dots, shown = output.groups()
    count = 0
    for name in dir(StrategyConformance):
        if not name.startswith("test_"):
            continue
        marks = getattr(getattr(StrategyConformance, name), "pytestmark", [])
        cases = [len(mark.args[1]) for mark in marks if mark.name == "parametrize"]
        count += cases[0] if cases else 1
    assert len(dots) == int(shown) == count
