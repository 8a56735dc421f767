"""Lite's reference stays whole: every public name of ``core.Lite`` has a docstring, which docs/api/lite.md renders
(the guide, docs/lite.md, links there instead of repeating it; tests/test_doc_blocks.py runs the guide's examples)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import core

ROOT = Path(__file__).resolve().parents[1]


def public_names() -> list[str]:
    return sorted(name for name in dir(core.Lite) if not name.startswith("_"))


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_of_lite_has_a_docstring(name: str) -> None:
    member = inspect.getattr_static(core.Lite, name)
    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    assert inspect.getdoc(target), f"Lite.{name} has no docstring, so docs/api/lite.md shows it without a word"


def test_the_api_page_renders_lite_with_its_members_and_the_guide_links_to_it() -> None:
    page = (ROOT / "docs" / "api" / "lite.md").read_text()
    assert "::: core.Lite\n" in page and "members:" not in page.split("::: core.Lite\n", 1)[1].split(":::", 1)[0]
    assert "(api/lite.md)" in (ROOT / "docs" / "lite.md").read_text()
