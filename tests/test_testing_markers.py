"""A plugin author's suite runs the kits' marked tests under ``--strict-markers``: core's pytest plugin (the
``pytest11`` entry point ``core``) registers the markers, with no configuration of theirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import core.testing

KIT = Path(core.testing.__file__).parent


def used_markers() -> set[str]:
    """The custom markers the kits put on their tests (``@pytest.mark.<name>``; timeout comes from pytest-timeout)."""
    import re

    found = {name for path in KIT.glob("*.py") for name in re.findall(r"@pytest\.mark\.(\w+)", path.read_text())}
    return found - {"timeout", "skipif", "parametrize", "usefixtures", "filterwarnings"}


@pytest.mark.parametrize("plugin", ["", "no:core"])
def test_the_kits_markers_are_registered_in_an_outside_suite(tmp_path: Path, plugin: str) -> None:
    assert used_markers() == {"distributed"}  # a new marker in a kit must be added to core/_pytest_plugin.py
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # an outside project: none of core's configuration
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n" + "".join(f"@pytest.mark.{name}\ndef test_{name}():\n    pass\n" for name in used_markers())
    )
    extra = ["-p", plugin] if plugin else []
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--strict-markers", "-p", "no:cacheprovider", *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if plugin:  # without core's plugin the same suite fails: the test shows what the plugin does
        assert done.returncode != 0 and "'distributed' not found in `markers` configuration option" in done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
