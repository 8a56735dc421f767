"""Running a conformance job: the worker script in a fresh process, started the way a user starts a script.

The job's processes are found in the process table by a token in their environment: spawned, forked and
re-executed ranks all inherit it, so the kit can tell when the last one is gone and that none is left.
A job that does not finish within its timeout is killed, every process of it, and the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

TOKEN_VARIABLE: Final = "CORE_TESTING_JOB_TOKEN"

# Variables a launcher or scheduler sets; a job must not inherit them from the test run.
_INHERITED_RANKS: Final = frozenset({
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "LOCAL_WORLD_SIZE", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED", "CORE_DDP_JOB",
    "CORE_LISTEN_FD",
})
_SCHEDULER_PREFIXES: Final = (
    "SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "MV2_", "MPI_", "MPIRUN_", "LSB_", "LSF_", "JSM_", "KUBEFLOW_",
)


def processes_with(token: str) -> list[int]:
    """Pids of live (not zombie) processes whose environment holds ``token``; empty where /proc is absent."""
    if not os.path.isdir("/proc"):
        return []
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":
                continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read():
                    found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def _kill_all(token: str) -> None:
    for pid in processes_with(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def job_environment(token: str, python_path: Sequence[str]) -> dict[str, str]:
    """This process's environment without ranks or scheduler variables, one thread per process."""
    environment = {
        key: value for key, value in os.environ.items()
        if key not in _INHERITED_RANKS and not key.startswith(_SCHEDULER_PREFIXES)
    }
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", TOKEN_VARIABLE: token})
    paths = [*python_path, *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    if paths:
        environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return environment


@attrs.frozen
class JobResult:
    """What a finished job left: the launcher's exit status and output, each rank's report, leftovers."""

    returncode: int
    stdout: str
    stderr: str
    world_size: int
    ranks: Mapping[int, Mapping[str, Any]]
    after_launch: Mapping[int, Mapping[str, Any]]
    launcher_pid: int
    leftovers: Sequence[int]
    timed_out: bool

    def output(self, limit: int = 6000) -> str:
        text = f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def describe(self) -> str:
        state = "timed out and was killed" if self.timed_out else f"exited with {self.returncode}"
        return f"the job {state}; ranks that reported: {sorted(self.ranks)}\n{self.output()}"


def run_job(
    spec: Mapping[str, Any],
    directory: Path,
    timeout: float,
    python_path: Sequence[str] = (),
    linger: float = 5.0,
    launcher: Sequence[str] = (),
) -> JobResult:
    """Run ``python -m core.testing._worker SPEC`` and collect what each rank wrote into ``directory``.

    :param launcher: A command that starts the ranks itself, put before the worker's command
        (``["horovodrun", "-np", "2", ...]``); empty to let the strategy launch them.
    """
    directory.mkdir(parents=True, exist_ok=True)
    spec_file = directory / "spec.json"
    spec_file.write_text(json.dumps({**spec, "out": str(directory)}))
    token = uuid.uuid4().hex
    process = subprocess.Popen(
        [*launcher, sys.executable, "-m", "core.testing._worker", str(spec_file)],
        env=job_environment(token, python_path),
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_all(token)
        process.kill()
        stdout, stderr = process.communicate()
    leftovers = _wait_for_exit(token, linger)
    _kill_all(token)
    return JobResult(
        returncode=process.returncode,
        stdout=stdout,
        stderr=stderr,
        world_size=int(spec["world_size"]),
        ranks=_read_reports(directory, "rank-"),
        after_launch=_read_reports(directory, "after-launch-"),
        launcher_pid=process.pid,
        leftovers=leftovers,
        timed_out=timed_out,
    )


def _wait_for_exit(token: str, linger: float) -> list[int]:
    """Give the job's last processes ``linger`` seconds to go; return those still alive."""
    deadline = time.monotonic() + linger
    alive = processes_with(token)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = processes_with(token)
    return alive


def _read_reports(directory: Path, prefix: str) -> dict[int, dict[str, Any]]:
    reports = {}
    for path in directory.glob(f"{prefix}*.json"):
        number = path.stem.removeprefix(prefix)
        if number.isdigit():
            reports[int(number)] = json.loads(path.read_text())
    return reports
