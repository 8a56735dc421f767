"""The fast metadata reader agrees with importlib_metadata and packaging, which it replaces on the hot path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import importlib_metadata
import pytest
import trove_classifiers
from conftest import Installer
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from core._records import ENTRY_POINT_GROUPS
from core.registry._metadata import canonical_name, entry_points, requirement_on, satisfies

GROUPS = frozenset(ENTRY_POINT_GROUPS.values())


def _reference() -> set[tuple[str, str, str, str, str]]:
    """What importlib_metadata finds for the plugin groups, the way discovery used to read it."""
    found = set()
    for group in GROUPS:
        for point in importlib_metadata.entry_points(group=group):
            assert point.dist is not None
            found.add((group, point.name, point.value, point.dist.name, point.dist.version))
    return found


def _ours() -> set[tuple[str, str, str, str, str]]:
    return {(r.group, r.name, r.value, r.distribution, r.version) for r in entry_points(GROUPS)}


def test_the_installed_entry_points_are_the_ones_importlib_metadata_finds() -> None:
    ours = _ours()
    assert ours == _reference()
    assert ("core.strategies", "single_device", "core.builtin.strategies:SingleDeviceStrategy") in {
        entry[:3] for entry in ours
    }


def test_throwaway_distributions_with_odd_metadata_are_read_like_importlib_metadata(installed: Installer) -> None:
    installed("Core_Odd.Name", {"strategy": {"odd": "odd_plugin:factory"}}, requires=(
        "numpy>=1", "core (>=0.1, <0.2)", "core>=9; extra == 'future'",
    ))
    installed("core-marker", {"precision": {"marked": "marked:factory"}}, requires=(
        "core>=5; python_version < '3'", "core~=0.1.0",
    ))
    assert _ours() == _reference()
    requires = {r.distribution: r.requires for r in entry_points(GROUPS)}
    assert requirement_on("core", requires["Core_Odd.Name"]) == "<0.2,>=0.1"
    assert requirement_on("core", requires["core-marker"]) == "~=0.1.0"  # the marker excludes the first line


def test_the_first_distribution_of_a_name_on_the_path_wins(installed: Installer, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    installed("core-twice", {"strategy": {"twice": "first:factory"}}, version="2.0.0")
    later = Installer(tmp_path / "later")
    later.site.mkdir()
    monkeypatch.syspath_prepend(str(later.site))  # now first on sys.path
    later("core-twice", {"strategy": {"twice": "second:factory"}}, version="1.0.0")
    (record,) = [r for r in entry_points(GROUPS) if r.name == "twice"]
    assert (record.value, record.version) == ("second:factory", "1.0.0")
    assert _ours() == _reference()


def test_an_egg_info_directory_is_read_with_its_unconditional_requirements(tmp_path: Path) -> None:
    info = tmp_path / "core_legacy.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.2\nName: core-legacy\nVersion: 0.3\n\nlong text: here\n")
    (info / "entry_points.txt").write_text("[core.strategies]\nlegacy = core_legacy:factory\n\n[other]\nx = y\n")
    (info / "requires.txt").write_text("torch\ncore<0.2,>=0.1\n\n[docs]\ncore>=7\n")
    (record,) = entry_points(GROUPS, paths=[str(tmp_path)])
    assert (record.group, record.name, record.distribution, record.version) == (
        "core.strategies", "legacy", "core-legacy", "0.3",
    )
    assert requirement_on("core", record.requires) == "<0.2,>=0.1"
    (info / "requires.txt").write_text("core>=0.1\n\n[:python_version < '3']\ncore>=9\n")
    (record,) = entry_points(GROUPS, paths=[str(tmp_path)])
    assert requirement_on("core", record.requires) == ">=0.1"


def test_names_are_compared_as_pep_503_says() -> None:
    assert canonical_name("Core_DDP") == canonical_name("core-ddp") == canonical_name("core.ddp") == "core-ddp"
    assert requirement_on("core", ["core-ddp>=1", "Core>=0.1"]) == ">=0.1"
    assert requirement_on("core", ["core-ddp>=1"]) is None
    assert requirement_on("core", ["core"]) is None


def test_reading_plugins_imports_neither_packaging_nor_importlib_metadata() -> None:
    code = (
        "import sys, core.registry._discovery as d; d.discover(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('packaging', 'importlib_metadata', 'email')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


releases = st.lists(st.integers(0, 12), min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))
comparisons = st.tuples(st.sampled_from(["==", "!=", ">=", "<=", ">", "<"]), releases).map("".join)


@given(version=releases, specifier=st.lists(comparisons, min_size=1, max_size=3).map(",".join))
def test_plain_release_comparisons_agree_with_packaging(version: str, specifier: str) -> None:
    assert satisfies(version, specifier) == SpecifierSet(specifier).contains(version, prereleases=True)


@given(
    specifier=st.lists(comparisons, min_size=0, max_size=3).map(",".join),
    spaced=st.booleans(),
    parenthesised=st.booleans(),
)
def test_requirement_specifiers_are_written_as_packaging_writes_them(
    specifier: str, spaced: bool, parenthesised: bool,
) -> None:
    written = specifier.replace(",", " , ") if spaced else specifier
    line = f"core ({written})" if parenthesised and specifier else f"core{written}"
    assert requirement_on("core", [line]) == (str(Requirement(line).specifier) or None)


@pytest.mark.parametrize(("version", "specifier"), [
    ("0.1.0rc1", ">=0.1"), ("0.1.0", "~=0.1.0"), ("0.1.0+local", "==0.1.0"), ("1.0.post1", ">1.0"), ("0.1", "==0.1.*"),
])
def test_anything_beyond_plain_releases_is_decided_by_packaging(version: str, specifier: str) -> None:
    assert satisfies(version, specifier) == SpecifierSet(specifier).contains(version, prereleases=True)



# Packaging metadata: what PyPI (and the index `make dist` writes) shows for each distribution. Every directory with
# a pyproject.toml is checked, so a new plugin or contrib package is held to it as soon as it exists.
ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ["", *sorted(p.parent.relative_to(ROOT).as_posix() for p in [
    *ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("contrib/*/pyproject.toml"),
])]


def _project(directory: Path) -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11
    project: dict[str, Any] = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    return project


def _metadata_problems(directory: Path, where: str) -> list[str]:
    """Each missing or malformed field of directory/pyproject.toml (`where` in the clone), as what to write."""
    project, root = _project(directory), _project(ROOT)
    problems = []
    summary = project.get("description", "")
    if not summary or "\n" in summary or len(summary) > 512:
        problems.append("description: one line of at most 512 characters (PyPI's summary)")
    if project.get("readme") != "README.md" or not (directory / "README.md").is_file():
        problems.append('readme = "README.md", and a README.md beside pyproject.toml (the index page shows it)')
    elif not (directory / "README.md").read_text().startswith(f"# {project['name']}"):
        problems.append(f"README.md: starts with the heading '# {project['name']}'")
    if project.get("requires-python") != root["requires-python"]:
        problems.append(f'requires-python = "{root["requires-python"]}" (as core)')
    if project.get("license") != root["license"]:
        problems.append(f'license = "{root["license"]}" (an SPDX expression, no License :: classifier)')
    classifiers = project.get("classifiers", [])
    unknown = sorted(set(classifiers) - trove_classifiers.classifiers)
    if not classifiers or unknown or "Programming Language :: Python :: 3" not in classifiers:
        problems.append(f"classifiers: valid trove classifiers, Python 3 among them (unknown: {unknown})")
    if any(classifier.startswith("License ::") for classifier in classifiers):
        problems.append("classifiers: no License :: classifier beside the license expression (PEP 639)")
    # No invented addresses: the project has no public home page yet, so no distribution declares [project.urls]
    # (they were placeholders); each ships the LICENSE text instead (tests/test_dist.py checks the built files).
    if "urls" in project:
        problems.append("[project.urls]: remove it (no public home page, documentation or tracker to point at yet)")
    if project.get("license-files") != ["LICENSE"]:
        problems.append('license-files = ["LICENSE"] (the Apache-2.0 text beside pyproject.toml)')
    if where:
        on_core = [Requirement(line) for line in project.get("dependencies", []) if Requirement(line).name == "core"]
        operators = {spec.operator for requirement in on_core for spec in requirement.specifier}
        if not (">=" in operators and "<" in operators) and "~=" not in operators:
            problems.append('dependencies: a range on core, "core>=0.1,<0.2" (docs/publishing.md, Versions)')
    return problems


@pytest.mark.parametrize("where", DISTRIBUTIONS, ids=lambda where: where or "core")
def test_every_distribution_has_complete_packaging_metadata(where: str) -> None:
    problems = _metadata_problems(ROOT / where, where)
    assert not problems, f"{where or '.'}/pyproject.toml:\n  " + "\n  ".join(problems)


def test_the_metadata_check_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "core-bare"\ndescription = "x"\ndependencies = ["core"]\nclassifiers = ["Made :: Up"]\n'
        '[project.urls]\nHomepage = "https://example.invalid"\n'
    )
    problems = "\n".join(_metadata_problems(tmp_path, "contrib/core-bare"))
    for expected in ('readme = "README.md"', "requires-python", "license", "unknown: ['Made :: Up']",
                     "[project.urls]: remove it", 'license-files = ["LICENSE"]', 'a range on core, "core>=0.1,<0.2"'):
        assert expected in problems
