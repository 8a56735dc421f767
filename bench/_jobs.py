"""Running a 2-process job of a benchmark: a clean environment, one thread per process, a hard timeout.

The job's launching process starts the second rank itself (the ``ddp`` family's launcher), so both run in
a new session; on a timeout the whole session is killed and the benchmark fails instead of hanging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

# Variables of an enclosing launcher that would make the job join some other run instead of starting its own.
_RANK_VARIABLES = frozenset({
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
    "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED",
})
_LAUNCHER_PREFIXES = ("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_")


def job_environment() -> dict[str, str]:
    """This process's environment without any rank variables, with one torch thread per process."""
    environment = {
        key: value for key, value in os.environ.items()
        if key not in _RANK_VARIABLES and not key.startswith(_LAUNCHER_PREFIXES)
    }
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    return environment


def run_job(module: str, arguments: Sequence[str], timeout: float) -> str:
    """``python -m <module> <arguments>``; its stdout, or a RuntimeError naming the failure or the timeout."""
    command = [sys.executable, "-m", module, *arguments]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=job_environment(),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # every rank: the launcher started the others in its session
        stdout, stderr = process.communicate()
        raise RuntimeError(
            f"{' '.join(command)} did not finish within {timeout:.0f} s (a hung collective?); killed.\n"
            f"{stderr[-3000:]}"
        ) from None
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-3000:]}")
    return stdout
