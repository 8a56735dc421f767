"""docs/lite.md stays true: every public Lite name is documented (tests/test_doc_blocks.py runs its examples)."""

from __future__ import annotations

from pathlib import Path

import pytest

import core

DOC = (Path(__file__).resolve().parents[1] / "docs" / "lite.md").read_text()


# Both loops of the conversion guide are run, as printed, by tests/test_doc_blocks.py (which checks their accuracy).


def public_names() -> list[str]:
    return sorted(name for name in dir(core.Lite) if not name.startswith("_"))


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_of_lite_is_documented(name: str) -> None:
    assert f"### `{name}(" in DOC or f"| `{name}` " in DOC, f"docs/lite.md does not document Lite.{name}"
