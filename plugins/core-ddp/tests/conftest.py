"""Fixtures of the core-ddp tests: real jobs of real processes, and a view of the process table.

Every job runs with a unique token in its environment. Processes inherit it (spawned, forked and
re-executed ranks alike), so the tests find every process of a job in ``/proc`` and can tell when the
last one is gone, and that none is left behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest

SCRIPTS = Path(__file__).parent / "scripts"
TOKEN_VARIABLE = "CORE_DDP_TEST_TOKEN"


def processes_with(token: str) -> list[int]:
    """Pids of live (not zombie) processes whose environment holds ``token``."""
    found = []
    needle = f"{TOKEN_VARIABLE}={token}".encode()
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
        except OSError:
            continue
    return found


@attrs.define
class Finished:
    """A job that ended: its launcher's status and output, and when its last process was gone."""

    returncode: int
    stdout: str
    stderr: str
    gone_at: float
    leftovers: list[int]
    #: What the job's processes left in their private TMPDIR (launchers' scratch directories).
    temporary: list[str]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@attrs.define
class Running:
    process: subprocess.Popen[str]
    token: str
    tmpdir: Path

    def processes(self) -> list[int]:
        return processes_with(self.token)

    def finish(self, timeout: float) -> Finished:
        """Wait for the launcher and for every process of the job; then look for leftovers."""
        deadline = time.monotonic() + timeout
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            stdout, stderr = self.process.communicate()
            pytest.fail(f"the job did not end within {timeout} s:\n{stdout}\n{stderr}")
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.01)
        gone_at = time.time()
        time.sleep(0.2)
        leftovers = self.processes()
        self.kill_all()
        temporary = sorted(path.name for path in self.tmpdir.iterdir())
        return Finished(self.process.returncode, stdout, stderr, gone_at, leftovers, temporary)

    def kill_all(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


class Jobs:
    """Starts jobs with a clean environment (no ranks inherited, one thread per process)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def environment(
        self, token: str, extra: dict[str, str] | None = None, tmpdir: Path | None = None,
    ) -> dict[str, str]:
        env = {
            key: value for key, value in os.environ.items()
            if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
                           "MASTER_PORT", "LOCAL_WORLD_SIZE", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID",
                           "CORE_DDP_JOB"}
            and not key.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))
        }
        env.update({"OMP_NUM_THREADS": "1", TOKEN_VARIABLE: token, "PYTHONUNBUFFERED": "1"})
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), env.get("PYTHONPATH", "")]))
        env.update(extra or {})
        return env

    def start(self, arguments: Sequence[str], extra_env: dict[str, str] | None = None) -> Running:
        token = uuid.uuid4().hex
        tmpdir = self.directory / f"tmp-{token[:8]}"
        tmpdir.mkdir()
        process = subprocess.Popen(
            list(arguments), env=self.environment(token, extra_env, tmpdir), cwd=self.directory,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        return Running(process, token, tmpdir)

    def run(self, arguments: Sequence[str], timeout: float = 60, extra_env: dict[str, str] | None = None) -> Finished:
        return self.start(arguments, extra_env).finish(timeout)

    def script(self, name: str, *arguments: str) -> list[str]:
        return [sys.executable, str(SCRIPTS / name), *arguments]


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    yield Jobs(tmp_path)


@pytest.fixture(scope="session")
def jobs_in() -> type[Jobs]:
    """``jobs_in(directory)``: a job starter for fixtures wider than one test (module-scoped jobs)."""
    return Jobs
