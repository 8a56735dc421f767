"""Running a 2-process job script from a test: a clean environment, a timeout, every process gone.

Shared by the tests of core-model-parallel and core-pipeline (whose conftest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

Job = Callable[..., subprocess.CompletedProcess[str]]
"""The ``job`` fixture: ``job("script.py", *arguments, timeout=120, check=True)``."""

_RANK_VARIABLES = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "LOCAL_WORLD_SIZE", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED"}


def run_script(
    script: Path, arguments: Sequence[str], python_path: Sequence[Path], timeout: float, check: bool
) -> subprocess.CompletedProcess[str]:
    """``python script ...`` with no inherited ranks and one thread per process; fails the test on error."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in _RANK_VARIABLES and not key.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))}
    search = [*map(str, python_path), environment.get("PYTHONPATH", "")]
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(search)})
    try:
        finished = subprocess.run([sys.executable, str(script), *arguments], env=environment, text=True,
                                  capture_output=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{script.name} did not finish within {timeout} s:\n{expired.output!r}\n{expired.stderr!r}")
    if check and finished.returncode != 0:
        pytest.fail(f"{script.name} exited with {finished.returncode}:\n{finished.stdout}\n{finished.stderr}")
    return finished
