"""The 2-process jobs of the core-model-parallel tests: scripts/<name> run by :func:`nd_jobs.run_script`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))  # the shared model (nd_transformer) and job runner (nd_jobs)

from nd_jobs import Job, run_script  # noqa: E402


@pytest.fixture(scope="session")
def job() -> Job:
    """``job("mp_job.py", *arguments, timeout=120, check=True)``."""

    def run(name: str, *arguments: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_script(SCRIPTS / name, arguments, [SCRIPTS], timeout, check)

    return run
