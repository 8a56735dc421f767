"""Generated documentation stays in step with its source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hook_reference_is_current(tmp_path: Path) -> None:
    fresh = tmp_path / "hooks.md"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_hooks_doc.py"), str(fresh)], check=True, timeout=60)
    committed = (ROOT / "docs" / "hooks.md").read_text()
    assert fresh.read_text() == committed, "docs/hooks.md is stale: run `make docs`"


def test_readme_shows_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme


# The README's example, like every other block of the docs, is run by tests/test_doc_blocks.py.

