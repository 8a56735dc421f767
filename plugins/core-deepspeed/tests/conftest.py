"""Fixtures of the core-deepspeed tests: real 2-process jobs, started the way a user starts a script.

Each job runs in its own session, so that a job which outlives its timeout is killed with every rank it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
JOB = SCRIPTS / "deepspeed_job.py"
REPOSITORY = Path(__file__).resolve().parents[3]

_RANK_VARIABLES = {
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
    "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED", "DS_ACCELERATOR",
}


def job_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any rank of an enclosing job; one thread per process on two shared cores."""
    env = {
        key: value for key, value in os.environ.items()
        if key not in _RANK_VARIABLES and not key.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))
    }
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def run_job(
    arguments: Sequence[str], cwd: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; on timeout kill its whole session and fail with what it printed."""
    process = subprocess.Popen(
        list(arguments), cwd=cwd, env=job_environment(extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(arguments)} did not end within {timeout} s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_deepspeed_job(mode: str, strategy: str, out: Path, *extra: str, timeout: float = 150) -> None:
    """One 2-process run of ``deepspeed_job.py``; its ranks leave their results in ``out``."""
    finished = run_job([sys.executable, str(JOB), mode, "--strategy", strategy, "--out", str(out), *extra],
                       cwd=out, timeout=timeout)
    assert finished.returncode == 0, f"{mode} with {strategy} failed:\n{finished.stdout}\n{finished.stderr}"


@pytest.fixture(scope="session")
def ds_job() -> Callable[..., None]:
    """``ds_job(mode, strategy, out, *flags)``: usable from module-scoped fixtures."""
    return run_deepspeed_job


@pytest.fixture(scope="session")
def command() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``command(arguments, cwd, timeout, extra_env=None)``: any command, as a job with a clean environment."""
    return run_job
