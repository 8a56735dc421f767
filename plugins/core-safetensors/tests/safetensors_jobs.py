"""Running the 2-process jobs of the core-safetensors tests: a clean environment, a timeout, every process gone.

A uniquely named module, so that test files import it by name: several plugins' test directories have a
conftest.py, and ``from conftest import`` picks whichever the run loaded first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
_RANK_VARIABLES = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "LOCAL_WORLD_SIZE", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED"}


def run_script(name: str, *arguments: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``python scripts/<name> ...`` with no inherited ranks and one thread per process; fails the test on error."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in _RANK_VARIABLES and not key.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))}
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    try:
        finished = subprocess.run([sys.executable, str(SCRIPTS / name), *arguments], env=environment, text=True,
                                  capture_output=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{name} did not finish within {timeout} s:\n{expired.output!r}\n{expired.stderr!r}")
    if finished.returncode != 0:
        pytest.fail(f"{name} exited with {finished.returncode}:\n{finished.stdout}\n{finished.stderr}")
    return finished
