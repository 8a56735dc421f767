"""No user page names a private module: what users read points at public paths only (``core.Trainer``, not
``core.trainer._run``; the ``cpu`` alias, not ``core.builtin.accelerators``).

The user pages are every page of docs/ except those the nav of mkdocs.yml files under "Plugin tutorials" and
under "Reference" > "For plugin authors": those document the toolkit and may say where a name is defined."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_docs_site import nav_pages

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# core.x._y, core._y, core_plugin._y (a dotted path with a private part), and the built-in plugins' package.
PRIVATE_MODULE = re.compile(
    r"\bcore(?:_[a-z_]+)?(?:\.[A-Za-z][A-Za-z0-9_]*)*\._[A-Za-z][A-Za-z0-9_]*|\bcore[./]builtin\b"
)


def section(entries: list[Any], *titles: str) -> list[Any]:
    """The nav entries under the section titled ``titles[0]`` > ``titles[1]`` > ..."""
    for entry in entries:
        if isinstance(entry, dict) and titles[0] in entry:
            found = entry[titles[0]]
            return section(found, *titles[1:]) if len(titles) > 1 else found
    raise AssertionError(f"mkdocs.yml's nav has no section {' > '.join(titles)!r}")


def plugin_author_pages() -> set[str]:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return set(nav_pages(section(nav, "Plugin tutorials"))) | set(
        nav_pages(section(nav, "Reference", "For plugin authors"))
    )


def user_pages() -> list[Path]:
    exempt = plugin_author_pages()
    return [page for page in sorted(DOCS.rglob("*.md")) if page.relative_to(DOCS).as_posix() not in exempt]


def test_the_split_leaves_users_most_pages_and_authors_theirs() -> None:
    users = {page.relative_to(DOCS).as_posix() for page in user_pages()}
    assert {"index.md", "getting-started.md", "trainer.md", "migrating-from-lightning.md", "api/trainer.md",
            "api/lite.md"} <= users
    assert {"writing-plugins.md", "tutorial-accelerator.md", "plugin-authors.md", "api/toolkit.md",
            "api/testing.md"} <= plugin_author_pages()


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: page.relative_to(DOCS).as_posix())
def test_no_user_page_names_a_private_module(page: Path) -> None:
    hits = [f"line {number}: {match.group(0)}" for number, line in enumerate(page.read_text().splitlines(), 1)
            for match in PRIVATE_MODULE.finditer(line)]
    assert hits == [], f"{page.relative_to(ROOT)} names private modules; use the public path or the alias: {hits}"


def test_the_pattern_finds_private_modules_and_spares_public_paths() -> None:
    for private in ("core.trainer._run", "core.lightning._trainer.Trainer", "core._errors", "core_ddp._strategy",
                    "core.builtin.accelerators.CPUAccelerator", "core/builtin/strategies.py"):
        assert PRIVATE_MODULE.search(private), private
    for public in ("core.Trainer", "core.toolkit.strategies.SingleDeviceStrategy", "core_ddp.DDPStrategy",
                   "self._x", "core.lightning", "Lite.__init__", "core.builtins_like"):
        assert not PRIVATE_MODULE.search(public), public
