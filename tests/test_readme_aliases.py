"""README's alias table says what `python -m core.plugins` lists: every current alias of this repository's
distributions (core, plugins/, contrib/) is in its kind's row with the distribution that provides it, and the table
names no alias that nothing provides. Legacy spellings (Lightning 1.x names, `16` for `16-mixed`) are left out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\w+) \| `core\.\w+` \| (.*) \|$")
# `a`, `b` (core-x): the aliases before a parenthesis belong to the distribution named in it.
GROUP = re.compile(r"((?:`[^`]+`(?:/`[^`]+`)?(?:, )?)+) \(([^)]+)\)")


def repository_distributions() -> set[str]:
    return {"core"} | {path.parent.name for path in ROOT.glob("*/core-*/pyproject.toml")}


def readme_table() -> dict[tuple[str, str], str]:
    """(kind, alias) -> the distribution the README names for it."""
    table: dict[tuple[str, str], str] = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        kind, cell = row.groups()
        for aliases, distribution in GROUP.findall(cell):
            for alias in re.findall(r"`([^`]+)`", aliases):
                table[(kind, alias)] = distribution.removeprefix("contrib/").removeprefix("plugins/")
    return table


def listed() -> dict[tuple[str, str], str]:
    """(kind, alias) -> distribution, for the current aliases of this repository's distributions that are installed."""
    rows = json.loads(subprocess.run([sys.executable, "-m", "core.plugins", "--json"], capture_output=True,
                                     text=True, check=True, timeout=60).stdout)
    ours = repository_distributions()
    return {(row["kind"], row["alias"]): row["distribution"] for row in rows
            if row["distribution"] in ours and not row["reason"].startswith("legacy name")
            and ":legacy_" not in row["target"]}


def test_the_readme_table_lists_every_current_alias_with_its_distribution() -> None:
    table, plugins = readme_table(), listed()
    assert table, "README.md has no alias table rows of the form '| kind | `core.group` | `alias` (dist) |'"
    missing = sorted(f"{kind} `{alias}` ({dist})" for (kind, alias), dist in plugins.items()
                     if table.get((kind, alias)) != dist)
    assert not missing, "README.md's alias table lacks (or names another distribution for):\n" + "\n".join(missing)


def test_the_readme_table_names_no_alias_that_nothing_provides() -> None:
    plugins = listed()
    unknown = sorted(f"{kind} `{alias}`" for kind, alias in readme_table() if (kind, alias) not in plugins)
    assert not unknown, f"README.md's alias table names aliases no installed distribution provides: {unknown}"
