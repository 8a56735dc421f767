"""Fixtures of the core-deepspeed tests: real 2-process jobs, started the way a user starts a script.

Each job runs in its own session, so that a job which outlives its timeout is killed with every rank it started.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
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


def _allow_core_files() -> None:
    """In the job (before exec): a rank that aborts leaves a core file (see :func:`native_backtraces`)."""
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def native_backtraces(directory: Path, timeout: float = 120) -> str:
    """The C++ stacks of a rank that died by a signal, read from its core file with gdb; the core is removed.

    Diagnostics only: a rare abort at a rank's exit ("terminate called without an active exception" in a stage-3
    job, about 1 run in 100 on a loaded machine) was root-caused from the stacks this printed: a gloo worker freeing
    the teardown barrier's operations during interpreter shutdown, closed by the teardown's wait for idle workers
    (core/toolkit/strategies/_settle.py, tests/test_teardown_settle.py). A core lands
    in the rank's working directory where the kernel's core_pattern is a plain file name; elsewhere, or without
    gdb, this says so.
    """
    cores = sorted(directory.glob("core*"))
    if not cores:
        return "no core file in the job's directory (core_pattern is not a plain file name here?)"
    gdb = shutil.which("gdb")
    reports = []
    for core in cores:
        if gdb is None:
            reports.append(f"{core.name}: gdb is not installed, no backtrace")
        else:
            try:
                traced = subprocess.run(
                    [gdb, "-batch", "-nx", "-ex", "thread apply all bt 25", sys.executable, str(core)],
                    capture_output=True, text=True, timeout=timeout,
                )
                reports.append(f"{core.name}:\n{_aborting_thread_last(traced.stdout)}")
            except subprocess.TimeoutExpired:
                reports.append(f"{core.name}: gdb did not finish within {timeout} s")
        core.unlink()
    return "\n".join(reports)


_FRAME = re.compile(r"^(?P<number>#\d+)\s+(?:0x[0-9a-f]+ in )?(?P<function>\S+) \(.*\) (?:at|from) (?P<where>\S+)$")


def _aborting_thread_last(gdb_output: str) -> str:
    """Each thread's first frames, then the whole stack of the threads that abort (the end of a long message is
    what a report keeps)."""
    threads: list[list[str]] = []
    for line in gdb_output.splitlines():
        if line.startswith("Thread "):
            threads.append([line.split(" (Thread ", 1)[0]])
        elif line.startswith("#") and threads:
            frame = _FRAME.match(line)  # "#3  0x... in __GI_abort () at ./stdlib/abort.c:79" -> "#3 __GI_abort abort.c"
            threads[-1].append(f"{frame['number']} {frame['function']} {Path(frame['where']).name}" if frame else line)
    aborting = [thread for thread in threads if any("abort" in line or "terminate" in line for line in thread)]
    others = [thread[:3] for thread in threads if thread not in aborting]
    return "\n".join(line for thread in [*others, *aborting] for line in thread)


def run_job(
    arguments: Sequence[str], cwd: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; on timeout kill its whole session and fail with what it printed.

    A rank killed by a signal leaves a core file; the native stacks read from it are appended to ``stderr``.
    """
    process = subprocess.Popen(
        list(arguments), cwd=cwd, env=job_environment(extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, preexec_fn=_allow_core_files,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(arguments)} did not end within {timeout} s:\n{stdout}\n{stderr}")
    if process.returncode < 0 or (process.returncode != 0 and "killed by signal" in stderr):
        stderr += "\nnative stacks of the killed process:\n" + native_backtraces(cwd)
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


@pytest.fixture(scope="session")
def backtraces() -> Callable[[Path], str]:
    """``backtraces(directory)``: the native stacks of the core files there (:func:`native_backtraces`)."""
    return native_backtraces
