"""scripts/process_cpu.py: the .pth hook logs each Python process's CPU at exit only when asked, and the report
sums it per command."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "process_cpu", Path(__file__).resolve().parents[1] / "scripts" / "process_cpu.py"
)
assert _SPEC is not None and _SPEC.loader is not None
process_cpu = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(process_cpu)

# A site directory like the venv's: site.addsitedir runs its .pth files, as start-up does for site-packages.
BURN = "import site, sys; site.addsitedir(sys.argv[1]); sum(i * i for i in range(2_000_000))"


def run_python(site_dir: Path, environment: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-c", BURN, str(site_dir)], check=True, env=environment, timeout=60)


def test_the_hook_logs_only_with_the_variable_and_the_report_sums_per_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site_dir, log = tmp_path / "site", tmp_path / "cpu.jsonl"
    site_dir.mkdir()
    process_cpu.install(site_dir)
    assert (site_dir / process_cpu.HOOK_PTH).read_text() == f"import {process_cpu.HOOK_MODULE}\n"
    run_python(site_dir, {"PATH": "/usr/bin:/bin"})
    assert not log.exists()  # inactive without CORE_PROCESS_CPU_LOG
    for _ in range(2):
        run_python(site_dir, {"PATH": "/usr/bin:/bin", "CORE_PROCESS_CPU_LOG": str(log)})
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2 and all(record["orig_argv"][1] == "-c" for record in records)
    assert all(record["user"] + record["sys"] > 0.01 for record in records), records  # the loop's CPU is counted
    process_cpu.report(log, top=5)
    out = capsys.readouterr().out
    assert "2 Python processes logged" in out and "-c <code>" in out and "      2 " in out, out
    process_cpu.uninstall(site_dir)
    assert sorted(path.name for path in site_dir.glob("*.p*")) == []  # .pth and .py gone (__pycache__ may stay)


def test_commands_are_named_without_their_per_run_arguments() -> None:
    def name(*argv: str) -> str:
        return process_cpu.command_of({"orig_argv": ["python", *argv]})

    assert name("-u", "/x/rank_job.py", "/tmp/out", "2") == "/x/rank_job.py"
    assert name("-m", "core.run", "train.py") == "-m core.run"
    assert name("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/t.py") == "-m pytest tests/t.py"
    assert name("-c", "import torch") == "-c <code>"


def test_a_missing_log_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="does not exist: install the hook, then run with CORE_PROCESS_CPU_LOG="):
        process_cpu.report(tmp_path / "none.jsonl", top=5)
