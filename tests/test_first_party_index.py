"""The first-party alias index (core/registry/first_party.json) matches the plugins' own entry points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import core
from core._records import ENTRY_POINT_GROUPS
from core.registry._discovery import FIRST_PARTY_INDEX, first_party

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11
ROOT = Path(__file__).resolve().parents[1]
GROUP_KINDS = {group: kind for kind, group in ENTRY_POINT_GROUPS.items()}


def _declared_by_pyprojects() -> dict[str, dict[str, list[str]]]:
    declared: dict[str, dict[str, list[str]]] = {}
    for pyproject in sorted([*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("contrib/*/pyproject.toml")]):
        project = tomllib.loads(pyproject.read_text())["project"]
        kinds: dict[str, list[str]] = {}
        for group, aliases in project.get("entry-points", {}).items():
            if group in GROUP_KINDS:
                kinds[GROUP_KINDS[group]] = sorted(aliases)
        if kinds:
            declared[project["name"]] = dict(sorted(kinds.items()))
    return declared


def test_the_index_lists_exactly_the_aliases_the_first_party_distributions_declare() -> None:
    index = json.loads(Path(FIRST_PARTY_INDEX).read_text())["distributions"]
    declared = _declared_by_pyprojects()
    assert len(declared) >= 14
    missing = {dist: kinds for dist, kinds in declared.items() if index.get(dist) != kinds}
    assert not missing, (
        f"core/registry/first_party.json is out of date; set these entries to what the pyprojects declare: "
        f"{json.dumps(missing)}"
    )
    stale = set(index) - set(declared)
    assert not stale, f"first_party.json has entries for distributions that do not exist: {stale}"


def test_an_uninstalled_first_party_alias_says_what_to_install() -> None:
    assert first_party()[("strategy", "fsdp")] == "core-fsdp"
    without_fsdp = core.Catalog(tuple(info for info in core.discover().entries if info.distribution != "core-fsdp"))
    with pytest.raises(core.UnknownPluginError, match="'fsdp' is provided by core-fsdp: pip install core-fsdp"):
        core.resolve(strategy="fsdp", catalog=without_fsdp)
