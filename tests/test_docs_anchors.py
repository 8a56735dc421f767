"""Links to a heading: every ``page.md#anchor`` and ``#anchor`` in README.md and docs/ names a heading (or an
``{#id}``) that exists. ``mkdocs build --strict`` checks that linked pages exist but not their anchors, so a
renamed heading broke links silently; this check reads the Markdown, slugged as the site's ``toc`` extension does.
"""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
ID = re.compile(r"""\sid=["']([^"']+)["']""")
# An API page's `::: core.Lite` renders anchors for the object and its members (core.Lite, core.Lite.launch).
OBJECT = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)
# The Markdown extensions of mkdocs.yml that make ids: headings (toc) and `{#id}` (attr_list); fences parsed as the
# site parses them, so a `# comment` in a code block is no heading.
EXTENSIONS = ["toc", "attr_list", "tables", "admonition", "pymdownx.superfences"]


def anchors_of(text: str) -> tuple[set[str], list[str]]:
    """The ids a page defines, rendered as the site renders it, and the objects its ``:::`` lines document."""
    html = markdown.Markdown(extensions=EXTENSIONS).convert(text)
    return set(ID.findall(html)), OBJECT.findall(text)


def broken_anchors(pages: list[Path]) -> list[str]:
    """Every link in ``pages`` to a heading that its target page does not have: ``page:line: link``."""
    cache: dict[Path, tuple[set[str], list[str]]] = {}

    def defined(page: Path) -> tuple[set[str], list[str]]:
        if page not in cache:
            cache[page] = anchors_of(page.read_text())
        return cache[page]

    broken = []
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            for target in LINK.findall(line):
                if "#" not in target or "://" in target or target.startswith("mailto:"):
                    continue
                path, anchor = target.split("#", 1)
                linked = (page.parent / path).resolve() if path else page
                if linked.suffix != ".md" or not linked.exists():
                    continue  # a missing page is mkdocs --strict's to report; a non-page link has no headings
                ids, objects = defined(linked)
                if anchor in ids or any(anchor == name or anchor.startswith(name + ".") for name in objects):
                    continue
                broken.append(f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{number}: {target}")
    return broken


def site_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_every_link_to_a_heading_finds_it() -> None:
    broken = broken_anchors(site_pages())
    assert not broken, "links to headings that do not exist (rename the link or the heading):\n" + "\n".join(broken)


def test_the_check_finds_a_missing_heading_and_accepts_real_ones(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text(
        "# Guide\n\n## `python -m core.run` and SLURM\n\n## Settings {#opts}\n\n## Options\n\n## Options\n\n"
        "```bash\n# not a heading\n```\n"
    )
    (tmp_path / "index.md").write_text(
        "See [a](guide.md#python-m-corerun-and-slurm), [b](guide.md#opts), [c](guide.md#options_1),\n"
        "[d](guide.md#not-a-heading), [e](#here) and [f](guide.md#python--m-corerun-and-slurm).\n\n## Here\n"
    )
    broken = broken_anchors([tmp_path / "index.md"])
    assert broken == [f"{tmp_path / 'index.md'}:2: guide.md#not-a-heading",
                      f"{tmp_path / 'index.md'}:2: guide.md#python--m-corerun-and-slurm"]


@pytest.mark.parametrize("title, slug", [("Two styles, one launch", "two-styles-one-launch"),
                                         ("After the run: sharded modules stay sharded",
                                          "after-the-run-sharded-modules-stay-sharded")])
def test_headings_are_slugged_as_the_site_slugs_them(title: str, slug: str) -> None:
    assert slug in anchors_of(f"## {title}\n")[0]
