"""The jobs' diagnostics: a process of a job that aborts leaves a core file, and its native stacks reach the
failure message (conftest.py's run_job and native_backtraces)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

_PATTERN = Path("/proc/sys/kernel/core_pattern")


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed: the stacks cannot be read")
@pytest.mark.skipif(not _PATTERN.exists() or _PATTERN.read_text().strip().startswith("|"),
                    reason="core files go to a program here (core_pattern), not to the process's directory")
def test_an_aborting_process_leaves_a_core_whose_stacks_name_the_abort(
    tmp_path: Path, command: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    finished = command([sys.executable, "-c", "import os; os.abort()"], tmp_path, 60)
    assert finished.returncode == -6
    stacks = finished.stderr.split("native stacks of the killed process:", 1)[1]
    aborting = stacks.rsplit("Thread ", 1)[-1]  # the aborting thread comes last
    assert "__GI_abort abort.c" in aborting and "os_abort" in aborting, stacks
    assert not list(tmp_path.glob("core*"))  # removed once read: cores are large


def test_without_a_core_file_the_report_says_so(tmp_path: Path, backtraces: Callable[[Path], str]) -> None:
    assert "no core file" in backtraces(tmp_path)
