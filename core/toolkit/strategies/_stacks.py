"""Where the other ranks were when a collective timed out: their Python stacks, dumped on request.

A rank whose collective times out knows only that someone else did not come. The rank that did not come knows
where it is, and :mod:`faulthandler` can say so from inside a signal handler, whatever the rank is doing (sleeping,
in a C call, holding the GIL). So every rank of a process group registers, once it is up:

- an unnamed file this process's :mod:`faulthandler` writes every thread's stack into on :data:`STACK_SIGNAL` (a
  real-time signal: ``SIGUSR1`` and ``SIGUSR2`` are preemption notices here), and
- its host, pid and that file under ``core/stacks/<global rank>`` in the process group's store.

The rank that timed out signals every other rank on its machine, waits briefly for their dumps and puts them in its
:class:`CollectiveTimeoutError`. Ranks on other machines are named with their host and pid: their dump is not
readable from here. A rank is signalled only once it registered (an unregistered one would be killed by the
signal), and the handler stays installed for the life of the process, so a late signal never kills it either.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Final

import torch.distributed as dist

STACK_SIGNAL: Final = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else None
"""The signal on which a registered rank dumps its Python stacks (``None`` where there are no real-time signals)."""

_KEY: Final = "core/stacks/{rank}"
_WAIT: Final = 3.0  # seconds for the signalled ranks' dumps to arrive
_SHOWN: Final = 4000  # characters of each rank's dump in the message


def _store() -> Any | None:
    """The default process group's store, ``None`` when there is none to reach."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


class _DumpFile:
    """This process's dump file, created and handed to faulthandler on first use.

    The file has no name (``TemporaryFile``): nothing is left behind, not even by a killed rank. Another process
    of the same user on the machine reads it as ``/proc/<pid>/fd/<fd>`` while this one lives."""

    def __init__(self) -> None:
        self.handle: IO[bytes] | None = None

    def path(self) -> str | None:
        """How another process of this machine reads the file, ``None`` where it cannot (no /proc, no signal)."""
        if STACK_SIGNAL is None or not Path(f"/proc/{os.getpid()}/fd").is_dir():
            return None
        if self.handle is None:
            self.handle = tempfile.TemporaryFile(prefix="core-stack-")  # noqa: SIM115  # open for the process's life
            faulthandler.register(STACK_SIGNAL, file=self.handle, all_threads=True)
        return f"/proc/{os.getpid()}/fd/{self.handle.fileno()}"


_DUMP_FILE = _DumpFile()  # process-wide, as the signal handler it holds


def register_stack(global_rank: int) -> bool:
    """Make this rank's stack available to the others of its process group; ``False`` when it cannot be."""
    store, path = _store(), _DUMP_FILE.path()
    if store is None or path is None:
        return False
    entry = {"host": socket.gethostname(), "pid": os.getpid(), "file": path}
    try:
        store.set(_KEY.format(rank=global_rank), json.dumps(entry))
    except (RuntimeError, ValueError):
        return False
    return True


def _read_dump(path: Path, offset: int, deadline: float) -> str | None:
    """What was appended to ``path`` after ``offset`` once it stops growing, ``None`` if nothing came in time."""
    size = offset
    while time.monotonic() < deadline:
        try:
            now = path.stat().st_size
        except OSError:
            return None
        if now > offset and now == size:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(now - offset).decode(errors="replace")
        size = now
        time.sleep(0.05)
    return None


def other_ranks_stacks(global_rank: int) -> str:
    """The Python stacks of the other ranks of the process group, dumped now (see the module docstring)."""
    store = _store()
    if store is None or STACK_SIGNAL is None or not dist.is_initialized():
        return ""
    host, lines, waiting = socket.gethostname(), [], []
    for rank in range(dist.get_world_size()):
        if rank == global_rank:
            continue
        key = _KEY.format(rank=rank)
        try:
            entry = json.loads(store.get(key)) if store.check([key]) else None
        except (RuntimeError, ValueError):
            entry = None
        if entry is None:
            lines.append(f"global rank {rank}: no stack (it never reached a collective of this run)")
            continue
        where = f"global rank {rank} (pid {entry['pid']} on {entry['host']})"
        if entry["host"] != host:
            lines.append(f"{where}: on another machine; its stack is not readable from here")
            continue
        path = Path(entry["file"])
        try:
            offset = path.stat().st_size
            os.kill(int(entry["pid"]), STACK_SIGNAL)
        except (OSError, ValueError):
            lines.append(f"{where}: gone (it exited)")
            continue
        waiting.append((where, path, offset))
    deadline = time.monotonic() + _WAIT
    for where, path, offset in waiting:
        dump = _read_dump(path, offset, deadline)
        if dump is None:
            lines.append(f"{where}: its stack did not arrive within {_WAIT:g} s")
        else:
            lines.append(f"{where}, most recent call first:\n{dump.strip()[:_SHOWN]}")
    return "\n".join(lines)
