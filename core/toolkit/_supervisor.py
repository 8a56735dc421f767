"""Supervision of the processes of one job: start them, watch them, stop all of them when one fails.

Used by ``python -m core.run`` (the launcher is not a rank) and by strategies that start processes
themselves (the launching process is rank 0). The rules are the same everywhere:

- a worker that exits non-zero or is killed by a signal fails the job: every other worker is killed
  (``SIGKILL``, its whole process group) and a report names the failed rank with its traceback or signal;
- a worker never outlives its launcher: it is started with ``PR_SET_PDEATHSIG=SIGKILL`` (Linux) and, where
  the runtime cooperates, a thread that watches its parent;
- a failing rank writes its traceback to the file named by ``CORE_RUN_ERROR_FILE`` before exiting, so the
  report can show it; a rank that only failed because a peer vanished marks its failure as secondary, so
  the report blames the rank that failed first.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

ERROR_FILE_VARIABLE: Final = "CORE_RUN_ERROR_FILE"
"""Where a supervised rank writes its failure (JSON: rank, traceback, secondary)."""

PARENT_PID_VARIABLE: Final = "CORE_RUN_PARENT_PID"
"""The pid of the launcher; a supervised rank stops when its parent is no longer this process."""

PREEMPTED_EXIT_CODE: Final = 75
"""A worker that exits with this stopped on a preemption notice after saving (EX_TEMPFAIL): not a failure."""

POLL_INTERVAL: Final = 0.05
HAS_PARENT_DEATH_SIGNAL: Final = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG: Final = 1


@attrs.define
class Worker:
    """One supervised process: its ranks, its handle and the file it reports a failure into."""

    global_rank: int
    local_rank: int
    handle: Any
    error_file: str
    own_process_group: bool = False

    @property
    def pid(self) -> int:
        return int(self.handle.pid)

    def exit_code(self) -> int | None:
        """``None`` while running; negative for a signal, as ``Popen.returncode``."""
        if isinstance(self.handle, subprocess.Popen):
            return self.handle.poll()
        return self.handle.exitcode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_process_group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)

    def reap(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            if isinstance(self.handle, subprocess.Popen):
                self.handle.wait(timeout)
            else:
                self.handle.join(timeout)


@attrs.frozen
class Failure:
    """How one worker failed."""

    global_rank: int
    local_rank: int
    pid: int
    exit_code: int
    traceback: str | None = None
    secondary: bool = False

    def describe(self) -> str:
        if self.exit_code < 0:
            number = -self.exit_code
            try:
                cause = f"was killed by signal {signal.Signals(number).name} ({number})"
            except ValueError:
                cause = f"was killed by signal {number}"
        else:
            cause = f"exited with code {self.exit_code}"
        return f"global rank {self.global_rank} (local rank {self.local_rank}, pid {self.pid}) {cause}"


def read_failure(worker: Worker, exit_code: int) -> Failure:
    """The failure of an exited worker, with the traceback it wrote if it wrote one."""
    details: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError), open(worker.error_file, encoding="utf-8") as file:
        details = json.load(file)
    return Failure(
        global_rank=worker.global_rank,
        local_rank=worker.local_rank,
        pid=worker.pid,
        exit_code=exit_code,
        traceback=details.get("traceback"),
        secondary=bool(details.get("secondary", False)),
    )


def format_report(prefix: str, root: Failure, others: Sequence[Failure], stopped: Sequence[int]) -> str:
    """The message printed when a job fails: the first failure, its traceback, and what followed."""
    lines = [f"{prefix}: {root.describe()}; the job is stopped."]
    if stopped:
        lines.append(f"{prefix}: stopped global rank(s) {sorted(stopped)}.")
    for other in others:
        if other.secondary:
            lines.append(f"{prefix}: global rank {other.global_rank} (pid {other.pid}) then failed: it lost a peer.")
        else:
            lines.append(f"{prefix}: then {other.describe()}.")
    if root.traceback:
        lines.append(f"{prefix}: traceback of global rank {root.global_rank}:")
        lines.append(root.traceback.rstrip())
    elif root.exit_code > 0:
        lines.append(f"{prefix}: global rank {root.global_rank} left no traceback; see its output above.")
    return "\n".join(lines)


class Supervisor:
    """Watches workers; :meth:`stop` kills those still running. Thread-safe."""

    def __init__(self, workers: Sequence[Worker], prefix: str = "core.run", scratch: str | None = None) -> None:
        self.workers = list(workers)
        self.prefix = prefix
        #: The workers' error-file directory, removed by :func:`abort` (which skips ``atexit`` handlers).
        self.scratch = scratch
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> bool:
        """Whether the caller is the first to handle a failure (the monitor thread or the main thread)."""
        with self._lock:
            first = not self._claimed
            self._claimed = True
            return first

    def failures(self) -> list[Failure]:
        """Failed workers, primary failures first; polled twice so that a rank that died before the
        one that lost it as a peer is never missed."""
        for _ in range(2):
            found = [
                read_failure(worker, code) for worker in self.workers
                if (code := worker.exit_code()) is not None and code not in (0, PREEMPTED_EXIT_CODE)
            ]
        return sorted(found, key=lambda failure: failure.secondary)

    def running(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.exit_code() is None]

    def wait(self, poll_interval: float = POLL_INTERVAL) -> list[Failure]:
        """Block until every worker exited 0 (returns ``[]``) or one failed (returns the failures).

        Returns ``[]`` as well once a failure was claimed by another caller, which handles it.
        """
        while not self._claimed:
            found = self.failures()
            if found:
                return found
            if not self.running():
                return []
            time.sleep(poll_interval)
        return []

    def stop(self, reap_timeout: float = 2.0) -> list[int]:
        """Kill every worker still running and reap them; return their global ranks."""
        alive = self.running()
        for worker in alive:
            worker.kill()
        deadline = time.monotonic() + reap_timeout
        for worker in self.workers:
            worker.reap(max(0.0, deadline - time.monotonic()))
        return [worker.global_rank for worker in alive]

    def report(self, found: Sequence[Failure], stopped: Sequence[int]) -> str:
        return format_report(self.prefix, found[0], found[1:], stopped)

    def watch(self, on_failure: Callable[[list[Failure]], None]) -> threading.Thread:
        """Poll in a daemon thread and call ``on_failure`` (from that thread) on the first failure."""

        def loop() -> None:
            found = self.wait()
            if found:
                on_failure(found)

        thread = threading.Thread(target=loop, name=f"{self.prefix}-monitor", daemon=True)
        thread.start()
        return thread


def abort(supervisor: Supervisor, found: Sequence[Failure]) -> None:
    """Stop the job from the launching process: kill the workers, print the report, ``os._exit(1)``.

    Used where the launcher is itself a rank whose main thread may be blocked inside a collective, so
    raising is not an option. A second caller (the main thread racing the monitor) waits to be killed.
    """
    if not supervisor.claim():
        while True:
            time.sleep(1)
    try:
        stopped = supervisor.stop()
        # The real stderr: an exception hook (torch.distributed's) may have redirected sys.stderr to a buffer. A
        # stderr whose reader went away (a closed pipe) raises here; the process must end all the same, or the
        # other caller waits above for ever.
        with contextlib.suppress(Exception):
            print(supervisor.report(found, stopped), file=sys.__stderr__ or sys.stderr, flush=True)
        if supervisor.scratch is not None:
            shutil.rmtree(supervisor.scratch, ignore_errors=True)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
    finally:
        os._exit(1)


# --------------------------------------------------------------------------------------------------
# Starting workers
# --------------------------------------------------------------------------------------------------


def set_parent_death_signal(expected_parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit at once if it already has."""
    if HAS_PARENT_DEATH_SIGNAL:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected_parent:
        os._exit(1)


def start_worker(
    command: Sequence[str],
    environment: Mapping[str, str],
    global_rank: int,
    local_rank: int,
    error_file: str,
    pass_fds: Sequence[int] = (),
) -> Worker:
    """Start ``command`` as a supervised worker in its own process group, tied to this process's life.

    :param pass_fds: Descriptors the worker inherits (a listening socket for its store, see
        :func:`core.toolkit.bind_listener`).
    """
    launcher = os.getpid()
    env = {**environment, ERROR_FILE_VARIABLE: error_file, PARENT_PID_VARIABLE: str(launcher)}
    handle = subprocess.Popen(
        list(command),
        env=env,
        start_new_session=True,
        preexec_fn=lambda: set_parent_death_signal(launcher),
        pass_fds=tuple(pass_fds),
    )
    return Worker(global_rank, local_rank, handle, error_file, own_process_group=True)


# --------------------------------------------------------------------------------------------------
# Inside a supervised worker
# --------------------------------------------------------------------------------------------------


def supervised() -> bool:
    """Whether this process was started by a supervisor that collects its failure."""
    return bool(os.environ.get(ERROR_FILE_VARIABLE))


def write_failure(error: BaseException, global_rank: int, secondary: bool) -> None:
    """Record this rank's failure where the supervisor reads it (no-op when not supervised)."""
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if not path:
        return
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as file:
        json.dump({"global_rank": global_rank, "traceback": text, "secondary": secondary}, file)


def watch_parent(poll_interval: float = 0.1) -> threading.Thread | None:
    """Exit this worker when the launcher that started it is gone (where PDEATHSIG is not available).

    Only acts when ``CORE_RUN_PARENT_PID`` names this process's actual parent, so a grandchild that
    inherited the variable does not watch the wrong process.
    """
    expected = os.environ.get(PARENT_PID_VARIABLE, "")
    if not expected.isdigit() or int(expected) != os.getppid() or HAS_PARENT_DEATH_SIGNAL:
        # On Linux the kernel already kills this process with its parent (see set_parent_death_signal),
        # and a daemon thread still sleeping at interpreter shutdown is one more way to crash there.
        return None
    parent = int(expected)

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(poll_interval)
        print(f"core: the launching process (pid {parent}) is gone; stopping pid {os.getpid()}.",
              file=sys.stderr, flush=True)
        os._exit(1)

    thread = threading.Thread(target=loop, name="core-parent-watch", daemon=True)
    thread.start()
    return thread
