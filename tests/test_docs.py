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


def test_readme_example_runs_on_two_ddp_processes(tmp_path: Path) -> None:
    import os

    import pytest

    pytest.importorskip("core_ddp", reason="the README example uses strategy='ddp' from plugins/core-ddp")
    readme = (ROOT / "README.md").read_text()
    example = readme.split("## Example", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "readme_example.py"
    script.write_text(example.replace("epochs: int = 10", "epochs: int = 3"))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1", "epoch 2"]  # rank 0 prints, once
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines]
    assert losses[-1] < losses[0]
