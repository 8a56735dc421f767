"""The 2-process jobs of the core-pipeline tests.

They train the same small transformer as core-model-parallel's tests (its tests/scripts directory holds the model,
nd_transformer, and the job runner, nd_jobs), so that the losses compare, and some read checkpoints its jobs wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
MODEL_PARALLEL_SCRIPTS = Path(__file__).parents[2] / "core-model-parallel" / "tests" / "scripts"
sys.path[:0] = [str(SCRIPTS), str(MODEL_PARALLEL_SCRIPTS)]

from nd_jobs import Job, run_script  # noqa: E402


@pytest.fixture(scope="session")
def job() -> Job:
    """``job("pp_job.py", *arguments)``, or a script of core-model-parallel's tests (``mp_job.py``)."""

    def run(name: str, *arguments: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        script = SCRIPTS / name if (SCRIPTS / name).exists() else MODEL_PARALLEL_SCRIPTS / name
        return run_script(script, arguments, [SCRIPTS, MODEL_PARALLEL_SCRIPTS], timeout, check)

    return run
