"""Settings exported by ``python -m core.run`` fill what a script left at its defaults, never more."""

from __future__ import annotations

import pytest

import core
from core import Lite


def _config(lite: Lite) -> core.ResolvedConfig:
    config = lite.launch(lambda lite: lite.active.config)
    assert config is not None  # one process: rank 0's result
    return config


def test_launcher_variables_fill_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_PRECISION", "64-true")
    monkeypatch.setenv("CORE_ACCELERATOR", "cpu")
    monkeypatch.setenv("CORE_DEVICES", "1")
    config = _config(Lite())
    assert (config.precision, config.accelerator, config.device_ids) == ("64-true", "cpu", (0,))


def test_explicit_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_PRECISION", "64-true")
    assert _config(Lite(precision="bf16-true")).precision == "bf16-true"


def test_bad_node_count_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_NUM_NODES", "two")
    with pytest.raises(core.ConfigurationError, match="CORE_NUM_NODES='two' is not a whole number"):
        Lite()


@pytest.mark.distributed  # core.run starts 2 processes
@pytest.mark.timeout(180)
def test_core_run_configures_a_script_that_names_nothing(tmp_path: pytest.TempPathFactory) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("core_ddp", reason="python -m core.run --strategy ddp needs plugins/core-ddp")
    script = Path(str(tmp_path)) / "plain.py"
    script.write_text(
        "from core import Lite\n"
        "def main(lite):\n"
        "    total = lite.all_reduce(lite.to_device(__import__('torch').ones(1)), reduce_op='sum')\n"
        "    lite.print(f'world={lite.world_size} strategy={lite.active.config.strategy} total={int(total)}')\n"
        "if __name__ == '__main__':\n"
        "    Lite().launch(main)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "core.run", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", str(script)],
        capture_output=True, text=True, timeout=170, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "world=2 strategy=ddp total=2" in result.stdout
