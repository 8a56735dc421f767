"""How the DDP family starts its processes, and how a rank fails without leaving the others hanging.

``popen`` (``ddp``): the launching process is rank 0; it starts the script's command line again as the
other local ranks and watches them from a thread. ``spawn`` / ``fork`` / ``forkserver``: the launching
process starts every local rank with ``torch.multiprocessing``, waits, and gets rank 0's return value.
Either way :mod:`core.toolkit._supervisor` stops every process of the job as soon as one fails.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import torch.distributed as dist
import torch.multiprocessing

from core.toolkit import (
    ERROR_FILE_VARIABLE,
    PARENT_PID_VARIABLE,
    PREEMPTED_EXIT_CODE,
    Failure,
    Supervisor,
    Worker,
    abort,
    set_parent_death_signal,
    start_worker,
    supervised,
    watch_parent,
    write_failure,
)

from ._errors import ProcessFailedError, is_peer_lost
from ._rendezvous import JOB_VARIABLE

PREFIX: Final = "core-ddp"

# A rank that sees a peer's connection drop may see it a moment before the peer's exit is visible to
# waitpid; it waits this long for the peer's failure before taking the blame itself.
PEER_EXIT_GRACE: Final = 0.5

# The exception being handled when each running rank function started (usually None). While a rank
# function runs, a different exception in flight means it is failing: the strategy's teardown then leaves
# the cleanup to the guard, which must stop the other ranks before any connection closes.
_outer_exceptions: list[BaseException | None] = []

# The local ranks this process started (``popen``), so that any failure of this rank stops them.
_children: Supervisor | None = None

# Rank 0's variables in a process that started its children with ``popen``.
_launch_variables: dict[str, str] = {}

# Whether this process's exception hook stops the job (installed once, at the first launch).
_hook_installed = False

# Whether a thread already watches this process's launcher.
_watching = False

# The last failure handled here, so that the exception hook does not handle it a second time.
_handled: BaseException | None = None


@attrs.frozen
class Layout:
    """Where the processes of this node sit in the job and where they meet."""

    devices_per_node: int
    num_nodes: int
    node_rank: int
    main_address: str
    main_port: int
    job_id: str | None = None  # set when this launcher hosts the job's store (see _rendezvous)

    @property
    def world_size(self) -> int:
        return self.devices_per_node * self.num_nodes

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.devices_per_node + local_rank

    def variables(self, local_rank: int) -> dict[str, str]:
        """The variables torchrun would set for ``local_rank``; the ``local`` environment reads them."""
        return {
            "MASTER_ADDR": self.main_address,
            "MASTER_PORT": str(self.main_port),
            "WORLD_SIZE": str(self.world_size),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(self.devices_per_node),
            "RANK": str(self.global_rank(local_rank)),
            **({JOB_VARIABLE: self.job_id} if self.job_id else {}),
        }


def failing() -> bool:
    """Whether a rank function runs under :func:`run_rank` here and an exception is escaping it."""
    current = sys.exc_info()[1]
    if isinstance(current, SystemExit) and current.code == PREEMPTED_EXIT_CODE:
        return False  # every rank stops together after a preemption notice: tear down as after a normal end
    return bool(_outer_exceptions) and current is not None and current is not _outer_exceptions[-1]


def _add_note(error: BaseException, note: str) -> None:
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # Python 3.10
        print(note, file=sys.stderr, flush=True)


def _destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _without_launcher_frames(error: BaseException) -> BaseException:
    """Drop the leading frames of this module from the traceback a supervisor will show."""
    frames = error.__traceback__
    while frames is not None and frames.tb_frame.f_globals.get("__name__") == __name__:
        frames = frames.tb_next
    return error.with_traceback(frames) if frames is not None else error


def _failures_within(children: Supervisor, grace: float) -> list[Failure]:
    deadline = time.monotonic() + grace
    found = children.failures()
    while not found and time.monotonic() < deadline:
        time.sleep(0.01)
        found = children.failures()
    return found


def _fail_rank(error: BaseException, global_rank: int, world_size: int, children: Supervisor | None) -> None:
    """Handle ``error`` escaping the rank function; returns only if the caller should re-raise it."""
    global _handled
    if error is _handled:
        return
    _handled = error
    secondary = is_peer_lost(error)
    if children is not None:
        # This process launched the other local ranks: it must stop them, and blame the right rank.
        found = _failures_within(children, PEER_EXIT_GRACE if secondary else 0.0)
        if secondary and found:
            mine = Failure(global_rank, 0, os.getpid(), 1, None, secondary=True)
            abort(children, [*found, mine])
        if not children.claim():
            while True:  # the monitor thread is stopping the job and will end this process
                time.sleep(1)
        stopped = children.stop()
        _forget_children(children)
        _destroy_process_group()
        _add_note(error, f"{PREFIX}: global rank {global_rank} of {world_size} failed with the error above; "
                         f"stopped global rank(s) {stopped}.")
        return
    if supervised():
        # A launcher collects this failure and stops the job; exit before closing any connection cleanly.
        write_failure(_without_launcher_frames(error), global_rank, secondary)
        _exit_now(1)
    _destroy_process_group()
    _add_note(error, f"{PREFIX}: raised on global rank {global_rank} of {world_size}.")


def _forget_children(children: Supervisor) -> None:
    """The job these children ran is over: a later launch in this process starts its own job.

    Without this, a script that catches the failure and launches again would find the stopped children (and
    the exported rank variables) of the finished job, and wait for ranks that are gone.
    """
    global _children
    if _children is children:
        _children = None
    for name, value in _launch_variables.items():
        if os.environ.get(name) == value:
            del os.environ[name]
    _launch_variables.clear()


def install_exception_hook(global_rank: int, world_size: int) -> None:
    """Treat an exception that ends the script after ``launch()`` returned like one escaping the function.

    ``lite.launch()`` without a function lets the script go on; an exception there reaches the interpreter
    (which calls ``sys.excepthook`` before any ``atexit`` teardown could wait for ranks that are not coming).
    """
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, frames: Any) -> None:
        _fail_rank(error, global_rank, world_size, _children)
        # torch.distributed's own hook may wrap this one with sys.stderr redirected to a buffer that it
        # prints only after this returns, which it will not: print to the real stderr.
        sys.stderr = sys.__stderr__ or sys.stderr
        previous(kind, error, frames)
        # The job is over. Run the exit handlers, then skip the interpreter's finalization: with torch
        # loaded it takes seconds on a busy machine, and the last process of a failed job should be gone.
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        _exit_now(130 if issubclass(kind, KeyboardInterrupt) else 1)

    sys.excepthook = hook


def run_rank(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], global_rank: int, world_size: int
) -> Any:
    """Run one rank's function; on an exception, stop the job as :mod:`core.toolkit._supervisor` describes."""
    _outer_exceptions.append(sys.exc_info()[1])
    try:
        return function(*args, **kwargs)
    except SystemExit as stop:
        if stop.code != PREEMPTED_EXIT_CODE:  # every rank stops together after a preemption: not a failure
            _fail_rank(stop, global_rank, world_size, _children)
        raise
    except BaseException as error:
        _fail_rank(error, global_rank, world_size, _children)
        raise
    finally:
        _outer_exceptions.pop()


_SCRATCH_PREFIX: Final = "core-ddp-"


def _new_scratch_directory() -> Path:
    """A private directory for the ranks' error files (and a spawned job's result), named after this process.

    It is removed when the job ends, but not when this process is SIGKILLed (the OOM killer, a scheduler): so
    each new one first removes those of this user whose process no longer exists.
    """
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{_SCRATCH_PREFIX}*-*"):
        owner = path.name[len(_SCRATCH_PREFIX):].split("-", 1)[0]
        with contextlib.suppress(OSError):
            if owner.isdigit() and path.stat().st_uid == os.getuid() and not _process_exists(int(owner)):
                shutil.rmtree(path, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=root))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@contextlib.contextmanager
def _scratch_directory() -> Iterator[Path]:
    path = _new_scratch_directory()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# popen: re-run the script as the other local ranks
# --------------------------------------------------------------------------------------------------


def script_command() -> list[str]:
    """This process's command line (``python script.py ...``, ``python -m pkg ...``), to run it again."""
    arguments = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return [sys.executable, *arguments[1:]]


def _wait_at_exit(children: Supervisor, monitor: threading.Thread) -> None:
    found = children.wait()
    if found:
        abort(children, found)
    # The monitor ends within one poll once the children are gone; a daemon thread still running at
    # interpreter shutdown can crash the process there.
    monitor.join(timeout=1.0)


def start_script_children(layout: Layout) -> Supervisor:
    """Start local ranks 1..N-1 as copies of this command line; this process becomes local rank 0.

    A monitor thread stops the job when a child fails; at exit this process waits for its children so
    that none is killed by this process ending first.
    """
    error_directory = _new_scratch_directory()
    workers = []
    for local_rank in range(1, layout.devices_per_node):
        environment = {**os.environ, **layout.variables(local_rank)}
        error_file = str(error_directory / f"rank-{layout.global_rank(local_rank)}.json")
        workers.append(
            start_worker(script_command(), environment, layout.global_rank(local_rank), local_rank, error_file)
        )
    _launch_variables.update(layout.variables(0))
    os.environ.update(_launch_variables)
    global _children
    children = _children = Supervisor(workers, prefix=PREFIX, scratch=str(error_directory))
    monitor = children.watch(lambda found: abort(children, found))
    atexit.register(shutil.rmtree, error_directory, ignore_errors=True)
    atexit.register(_wait_at_exit, children, monitor)
    return children


def restore_launch_variables() -> None:
    """Export rank 0's variables again in a process that launched children (``popen``) for a later run.

    The environment's teardown at the end of a run may remove variables it exported (``MASTER_PORT``);
    the children still hold them, so a second run in the same script must meet them at the same place.
    """
    if _launch_variables:
        os.environ.update(_launch_variables)


def start_supervised_child() -> None:
    """In a process started by a launcher: die with it even where PDEATHSIG is not available."""
    global _watching
    if supervised() and not _watching:
        _watching = watch_parent() is not None


# --------------------------------------------------------------------------------------------------
# spawn / fork / forkserver: torch.multiprocessing, the caller waits and gets rank 0's result
# --------------------------------------------------------------------------------------------------


def _process_entry(
    local_rank: int,
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    layout: Layout,
    scratch: str,
    parent: int,
) -> None:
    set_parent_death_signal(parent)
    global_rank = layout.global_rank(local_rank)
    os.environ.update(layout.variables(local_rank))
    os.environ[ERROR_FILE_VARIABLE] = os.path.join(scratch, f"rank-{global_rank}.json")
    os.environ[PARENT_PID_VARIABLE] = str(parent)
    watch_parent()
    run_rank(_call_and_keep, (function, args, kwargs, global_rank, scratch), {}, global_rank, layout.world_size)


def _own_module_memory(value: Any) -> None:
    """Give every module passed to a spawned rank private parameters and buffers.

    torch.multiprocessing sends CPU tensors through shared memory, so without this the ranks would train one
    shared set of weights and every optimizer step would land once per rank.
    """
    if isinstance(value, torch.nn.Module):
        with torch.no_grad():
            for tensor in (*value.parameters(), *value.buffers()):
                if tensor.is_shared():
                    tensor.data = tensor.data.clone()
    elif isinstance(value, (list, tuple)):
        for item in value:
            _own_module_memory(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            _own_module_memory(item)


def _call_and_keep(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], global_rank: int, scratch: str
) -> None:
    _own_module_memory(args)
    _own_module_memory(kwargs)
    result = function(*args, **kwargs)
    if global_rank == 0:
        with open(os.path.join(scratch, "result.pickle"), "wb") as file:
            pickle.dump(result, file)


def start_processes(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
                    layout: Layout, start_method: str) -> Any:
    """Run the function in one new process per local rank; return global rank 0's result, or raise."""
    with _scratch_directory() as scratch:
        context = torch.multiprocessing.start_processes(
            _process_entry,
            args=(function, args, kwargs, layout, str(scratch), os.getpid()),
            nprocs=layout.devices_per_node,
            join=False,
            start_method=start_method,
        )
        workers = [
            Worker(layout.global_rank(index), index, process, str(scratch / f"rank-{layout.global_rank(index)}.json"))
            for index, process in enumerate(context.processes)
        ]
        processes = Supervisor(workers, prefix=PREFIX)
        try:
            found = processes.wait()
        except BaseException:
            processes.stop()
            raise
        stopped = processes.stop()
        if found:
            raise ProcessFailedError(processes.report(found, stopped), found[0].global_rank, found[0].exit_code)
        result_file = scratch / "result.pickle"
        if not result_file.exists():
            return None
        with open(result_file, "rb") as file:
            return pickle.load(file)
