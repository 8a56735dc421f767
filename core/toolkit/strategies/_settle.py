"""Waiting for gloo's worker threads to go idle before a run's teardown returns.

gloo runs every collective on worker threads of its process group (``pt_gloo_runloop``), and such a thread drops
its references to a finished operation *after* the waiting rank already moved on. When that reference is the last
one, the thread frees the operation's tensors there and then, which takes the GIL for tensors Python knew (and runs
whatever their deallocation runs: weakref callbacks, a ``__del__``). If the main thread has meanwhile reached the
end of the program, the worker takes the GIL during interpreter finalization, CPython ends the thread with
``pthread_exit`` inside a ``noexcept`` C++ destructor, and the process aborts: "terminate called without an active
exception", exit code 134, after a run that had finished. A DeepSpeed ZeRO-3 job did this about once in a hundred
runs under load: the teardown barrier holds its prior operations (a parameter all-gather) until the barrier itself
is freed, on the worker, just as the rank's script ends.

:func:`settle` closes that window: it releases the GIL and waits until every gloo worker thread of the process is
asleep, so the frees they had pending have run, while the interpreter is alive. The teardown barrier's operation is
held by the caller across :func:`settle`, so that its last reference, and with it the operations it waited for, is
dropped on the main thread, with the GIL, not on a worker.

A worker counts as idle when it sleeps in an untimed futex wait (its queue's condition variable) at both ends of a
window longer than the interpreter's switch interval, with its context switches unchanged in between (the futex's
address is not compared). A worker waiting for the GIL waits with a timeout, one in a collective too (gloo's receive has
the group's timeout), one in ``time.sleep`` is not in a futex, and one running or waiting to run is in state ``R``: all
of them are waited for, up to :func:`settle`'s ``timeout``. So is a collective that never completes (an operation the
other ranks never started, on a group of the user's): the teardown then goes on after ``timeout``. Linux only
(``/proc``); where a thread's ``wchan`` or ``syscall`` cannot be read, its state and context switches alone decide;
elsewhere :func:`settle` returns at once.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Final

_THREAD_NAME: Final = "pt_gloo_runloop"
_TASKS: Final = "/proc/self/task"

_Snapshot = dict[str, tuple[bool, str]]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:  # the thread ended between listing and reading, or the file is not readable here
        return None


def _untimed_futex_wait(tid: str) -> bool | None:
    """Whether the thread sleeps in a futex wait without a timeout; ``None`` when ``/proc`` does not say."""
    wchan = _read(f"{_TASKS}/{tid}/wchan")
    syscall = _read(f"{_TASKS}/{tid}/syscall")
    if not wchan or not syscall or wchan.strip() == "0":
        return None
    fields = syscall.split()
    # number, six arguments, stack and instruction pointers; futex's fourth argument is its timeout
    return "futex" in wchan and len(fields) >= 5 and fields[4] == "0x0"


def _worker_states() -> _Snapshot:
    """For each gloo worker thread of this process: whether it looks idle, and what must not change while it is."""
    states: _Snapshot = {}
    for tid in os.listdir(_TASKS):
        if (_read(f"{_TASKS}/{tid}/comm") or "").strip() != _THREAD_NAME:
            continue
        status = _read(f"{_TASKS}/{tid}/status")
        if status is None:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        asleep = fields.get("State", "?").strip().startswith("S")
        waiting = _untimed_futex_wait(tid)
        idle = asleep and waiting is not False
        signature = "/".join(fields.get(key, "").strip()
                             for key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
        states[tid] = (idle, signature)
    return states


def settle(timeout: float = 10.0) -> bool:
    """Wait, the GIL released, until every gloo worker thread of this process sleeps; at most ``timeout`` seconds.

    Returns whether they did (at once when there are none, or off Linux). A thread still busy after ``timeout``
    is left to finish on its own: the teardown goes on rather than hang.
    """
    if not os.path.isdir(_TASKS):
        return True
    window = max(0.01, 2 * sys.getswitchinterval())
    deadline = time.monotonic() + timeout
    previous = _worker_states()
    while previous:
        time.sleep(window)
        current = _worker_states()
        if current == previous and all(idle for idle, _ in current.values()):
            return True
        if time.monotonic() >= deadline:
            return False
        previous = current
    return True
