"""Launchers: objects that start the processes of a job and run one rank's function in each.

A :class:`Launcher` is what a strategy's ``strategy_launch`` hands the function to (Lightning's launchers are
the model: a tiny ABC, one class per way of starting processes, each holding its own state):

- :class:`ScriptLauncher` (``ddp``): the launching process is rank 0; it starts the script's command line again
  as the other local ranks and watches them from a thread;
- :class:`MultiprocessingLauncher` (``ddp_spawn`` / ``ddp_fork`` / ``ddp_notebook``): the launching process
  starts every local rank with ``torch.multiprocessing``, waits, and returns rank 0's result;
- :class:`ExternalLauncher`: the processes were started by someone else (torchrun, srun, mpirun,
  ``python -m core.run``, a :class:`ScriptLauncher`'s parent); it runs this process's rank.

Whichever started them, :class:`core.toolkit.Supervisor` stops every process of the job as soon as one fails,
and a rank whose function raises stops the others before any connection closes (:meth:`RankLauncher.run_rank`).
While that happens, :func:`failing` tells the strategy's teardown not to wait in a collective for ranks that
are gone.
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
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import attrs
import torch.distributed as dist
import torch.multiprocessing

from core import ConfigurationError
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
from ._rendezvous import JOB_VARIABLE, HostedStore, host_store

# A rank that sees a peer's connection drop may see it a moment before the peer's exit is visible to
# waitpid; it waits this long for the peer's failure before taking the blame itself.
PEER_EXIT_GRACE: Final = 0.5

# For each rank function running in this context (innermost last), the exception that was being handled when
# it started (usually None). A different exception in flight means the function is failing. A context
# variable, not launcher state: a strategy's teardown asks from inside the function, whichever launcher (or copy
# of one, in a spawned process) runs it.
_RUNNING: ContextVar[tuple[BaseException | None, ...]] = ContextVar("core_running_rank_functions", default=())


def failing() -> bool:
    """Whether a rank function runs under a launcher here and an exception is escaping it.

    A strategy's teardown asks this before any collective: while the function fails, the launcher stops the
    other ranks, and a barrier would wait for ranks that are not coming. A rank stopping on a preemption notice
    (``SystemExit`` with :data:`core.toolkit.PREEMPTED_EXIT_CODE`) is not failing: every rank stops together.
    """
    current = sys.exc_info()[1]
    if isinstance(current, SystemExit) and current.code == PREEMPTED_EXIT_CODE:
        return False
    running = _RUNNING.get()
    return bool(running) and current is not None and current is not running[-1]


@attrs.frozen
class Layout:
    """Where the processes of this node sit in the job and where they meet."""

    devices_per_node: int
    num_nodes: int
    node_rank: int
    main_address: str
    main_port: int
    job_id: str | None = None  # set when the launcher hosts the job's store

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


class Launcher(ABC):
    """How a strategy starts the processes of a job and runs the function in them."""

    @property
    @abstractmethod
    def is_interactive_compatible(self) -> bool:
        """Whether it can start processes from a REPL or a notebook (only ``fork`` can)."""

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` as every rank of this node; return global rank 0's result here."""

    def end_run(self) -> None:  # noqa: B027  (optional: most launchers have nothing to undo)
        """The run ended normally (the strategy's teardown): undo what :meth:`launch` installed in this process."""


class LaunchedChildren:
    """The local ranks a process started by running its script again, the variables it runs rank 0 under, and the
    store it serves them.

    They belong to the process, not to one run: a later run in the same script (``Trainer.test`` after
    ``Trainer.fit``, a second ``Lite``) meets the same children, so its launcher must find them to stop them
    when it fails. :data:`THIS_PROCESS` is this process's record; a launcher takes it as an argument (tests pass
    their own).
    """

    def __init__(self) -> None:
        self.supervisor: Supervisor | None = None
        self.variables: dict[str, str] = {}
        # The job's store this process serves: every later run of the children meets there again.
        self.store: HostedStore | None = None
        self.watching_parent = False

    def restore_variables(self) -> None:
        """Export rank 0's variables again in a process that started children, for a later run.

        The environment's teardown at the end of a run may remove variables it exported (``MASTER_PORT``);
        the children still hold them, so a second run in the same script must meet them at the same place.
        """
        if self.variables:
            os.environ.update(self.variables)

    def forget(self, supervisor: Supervisor) -> None:
        """The job these children ran is over: a later launch in this process starts its own job.

        Without this, a script that catches the failure and launches again would find the stopped children (and
        the exported rank variables) of the finished job, and wait for ranks that are gone.
        """
        if self.supervisor is supervisor:
            self.supervisor = None
        for name, value in self.variables.items():
            if os.environ.get(name) == value:
                del os.environ[name]
        self.variables.clear()


THIS_PROCESS: Final = LaunchedChildren()
"""The children this process started with a :class:`ScriptLauncher` (none unless it did)."""


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


def _original_hook(hook: Callable[..., Any]) -> Callable[..., Any]:
    """The hook under any left by launchers whose run ended in a failure (see :meth:`RankLauncher.end_run`)."""
    while isinstance(getattr(hook, "__self__", None), RankLauncher):
        hook = hook.__self__._previous_hook or sys.__excepthook__  # type: ignore[attr-defined]
    return hook


def _reaches(hook: Any, target: Callable[..., Any], depth: int = 4) -> bool:
    """Whether ``hook`` is ``target`` or wraps it through closures: ``init_process_group`` installs a hook of its
    own over the current one at every run (and never removes it), so during a run ours sits under torch's."""
    if hook == target:
        return True
    if depth == 0:
        return False
    cells = getattr(hook, "__closure__", None) or ()
    for cell in cells:
        with contextlib.suppress(ValueError):  # an empty cell
            if callable(cell.cell_contents) and _reaches(cell.cell_contents, target, depth - 1):
                return True
    return False


class RankLauncher(Launcher):
    """What every launcher that runs a rank in this process shares: the rank's failure stops the job.

    :param prefix: What its messages start with (the strategy's distribution: ``core-ddp``).
    :param children: The record of the children this process started (:data:`THIS_PROCESS`).
    """

    def __init__(self, prefix: str, children: LaunchedChildren = THIS_PROCESS) -> None:
        self.prefix = prefix
        self.children = children
        self._handled: BaseException | None = None  # the last failure handled, so the hook does not repeat it
        self._previous_hook: Callable[..., Any] | None = None  # set while this launcher's excepthook is installed
        self._rank: tuple[int, int] = (0, 1)  # (global rank, world size) of the rank it runs here

    def __getstate__(self) -> dict[str, Any]:
        # A spawned rank gets the options; the run's state (an installed hook, a hosted store) stays here.
        state = dict(self.__dict__)
        state.update(_handled=None, _previous_hook=None, children=LaunchedChildren())
        return state

    def run_rank(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
                 global_rank: int, world_size: int) -> Any:
        """Run one rank's function; on an exception, stop the job (see :class:`core.toolkit.Supervisor`)."""
        self._rank = (global_rank, world_size)
        token = _RUNNING.set((*_RUNNING.get(), sys.exc_info()[1]))
        try:
            return function(*args, **kwargs)
        except SystemExit as stop:
            if stop.code != PREEMPTED_EXIT_CODE:  # every rank stops together after a preemption: not a failure
                self._fail_rank(stop)
            raise
        except BaseException as error:
            self._fail_rank(error)
            raise
        finally:
            _RUNNING.reset(token)

    def _fail_rank(self, error: BaseException) -> None:
        """Handle ``error`` escaping the rank function; returns only if the caller should re-raise it."""
        if error is self._handled:
            return
        self._handled = error
        global_rank, world_size = self._rank
        secondary = is_peer_lost(error)
        children = self.children.supervisor
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
            self.children.forget(children)
            _destroy_process_group()
            _add_note(error, f"{self.prefix}: global rank {global_rank} of {world_size} failed with the error above; "
                             f"stopped global rank(s) {stopped}.")
            return
        if supervised():
            # A launcher collects this failure and stops the job; exit before closing any connection cleanly.
            write_failure(_without_launcher_frames(error), global_rank, secondary)
            _exit_now(1)
        _destroy_process_group()
        _add_note(error, f"{self.prefix}: raised on global rank {global_rank} of {world_size}.")

    def install_exception_hook(self) -> None:
        """Treat an exception that ends the script after ``launch()`` returned like one escaping the function.

        ``lite.launch()`` without a function lets the script go on; an exception there reaches the interpreter
        (which calls ``sys.excepthook`` before any ``atexit`` teardown could wait for ranks that are not coming).
        The previous hook comes back at :meth:`end_run`.
        """
        if self._previous_hook is not None:
            return
        self._previous_hook = _original_hook(sys.excepthook)
        sys.excepthook = self._excepthook

    def _excepthook(self, kind: type[BaseException], error: BaseException, frames: Any) -> None:
        self._fail_rank(error)
        # torch.distributed's own hook may wrap this one with sys.stderr redirected to a buffer that it
        # prints only after this returns, which it will not: print to the real stderr.
        sys.stderr = sys.__stderr__ or sys.stderr
        (self._previous_hook or sys.__excepthook__)(kind, error, frames)
        # The job is over. Run the exit handlers, then skip the interpreter's finalization: with torch
        # loaded it takes seconds on a busy machine, and the last process of a failed job should be gone.
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        _exit_now(130 if issubclass(kind, KeyboardInterrupt) else 1)

    def end_run(self) -> None:
        """Put back the ``sys.excepthook`` found at launch (with the one ``init_process_group`` put over this
        launcher's, if it did; not one the program installed during the run).

        Called by the strategy's teardown when the run ended normally. After a failure the hook stays: the
        exception on its way out ends this process through it; if the script catches it and launches again, the
        next launcher installs its own hook over the original one, not over this.
        """
        previous, self._previous_hook = self._previous_hook, None
        if previous is not None and _reaches(sys.excepthook, self._excepthook):
            sys.excepthook = previous


class ExternalLauncher(RankLauncher):
    """Runs this process's rank of a job whose processes someone else started (torchrun, srun, ``core.run``)."""

    def __init__(self, prefix: str, global_rank: int, world_size: int,
                 children: LaunchedChildren = THIS_PROCESS) -> None:
        super().__init__(prefix, children)
        self._rank = (global_rank, world_size)

    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if supervised() and not self.children.watching_parent:
            # Die with the launcher even where PDEATHSIG is not available.
            self.children.watching_parent = watch_parent() is not None
        self.install_exception_hook()
        return self.run_rank(function, args, kwargs, *self._rank)


def _new_scratch_directory(prefix: str) -> Path:
    """A private directory for the ranks' error files (and a spawned job's result), named after this process.

    It is removed when the job ends, but not when this process is SIGKILLed (the OOM killer, a scheduler): so
    each new one first removes those of this user whose process no longer exists.
    """
    root = Path(tempfile.gettempdir())
    start = f"{prefix}-"
    for path in root.glob(f"{start}*-*"):
        owner = path.name[len(start):].split("-", 1)[0]
        with contextlib.suppress(OSError):
            if owner.isdigit() and path.stat().st_uid == os.getuid() and not _process_exists(int(owner)):
                shutil.rmtree(path, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{start}{os.getpid()}-", dir=root))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class _HostingLauncher(RankLauncher):
    """A launcher that starts the ranks of this node; on a single node it serves the job's store itself."""

    def __init__(self, prefix: str, layout: Layout, timeout: timedelta,
                 children: LaunchedChildren = THIS_PROCESS) -> None:
        super().__init__(prefix, children)
        self.layout = layout
        self.timeout = timeout
        self.hosted: HostedStore | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["hosted"] = None  # a TCPStore server stays in the launching process
        return state

    def _hosting_layout(self) -> Layout:
        """The layout with the store's port and the job's id when this process serves the store (one node).

        This process starts every rank of the job: it serves the store itself, bound before any rank starts, and
        the ranks connect to it (no port chosen now and bound later by someone else).
        """
        layout = self.layout
        if layout.num_nodes != 1:
            return layout
        self.hosted = host_store(layout.main_address, layout.main_port, layout.world_size, self.timeout)
        return attrs.evolve(layout, main_port=self.hosted.port, job_id=self.hosted.job_id)


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


class ScriptLauncher(_HostingLauncher):
    """Starts local ranks 1..N-1 by running this script's command line again; this process is local rank 0.

    A monitor thread stops the job when a child fails; at exit this process waits for its children so that none
    is killed by this process ending first.
    """

    @property
    def is_interactive_compatible(self) -> bool:
        return False  # a notebook cell is no command line to run again

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        layout = self._hosting_layout()
        self._start_children(layout)
        self.install_exception_hook()
        return self.run_rank(function, args, kwargs, layout.global_rank(0), layout.world_size)

    def _start_children(self, layout: Layout) -> None:
        error_directory = _new_scratch_directory(self.prefix)
        workers = []
        for local_rank in range(1, layout.devices_per_node):
            environment = {**os.environ, **layout.variables(local_rank)}
            error_file = str(error_directory / f"rank-{layout.global_rank(local_rank)}.json")
            workers.append(
                start_worker(script_command(), environment, layout.global_rank(local_rank), local_rank, error_file)
            )
        self.children.variables.update(layout.variables(0))
        self.children.store = self.hosted
        os.environ.update(self.children.variables)
        children = self.children.supervisor = Supervisor(workers, prefix=self.prefix, scratch=str(error_directory))
        monitor = children.watch(lambda found: abort(children, found))
        atexit.register(shutil.rmtree, error_directory, ignore_errors=True)
        atexit.register(_wait_at_exit, children, monitor)


class MultiprocessingLauncher(_HostingLauncher):
    """Starts every local rank with ``torch.multiprocessing`` (spawn, fork, forkserver); returns rank 0's result.

    :param start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``.
    """

    START_METHODS: Final = ("spawn", "fork", "forkserver")

    def __init__(self, prefix: str, layout: Layout, timeout: timedelta, start_method: str,
                 children: LaunchedChildren = THIS_PROCESS) -> None:
        super().__init__(prefix, layout, timeout, children)
        if start_method not in self.START_METHODS:
            raise ConfigurationError(
                f"MultiprocessingLauncher(start_method={start_method!r}) is not a start method of "
                f"torch.multiprocessing; expected one of {list(self.START_METHODS)}."
            )
        self.start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self.start_method == "fork"  # the others import the function from a file, which a cell is not

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        layout = self._hosting_layout()
        with _scratch_directory(self.prefix) as scratch:
            context = torch.multiprocessing.start_processes(
                _process_entry,
                args=(self, function, args, kwargs, layout, str(scratch), os.getpid()),
                nprocs=layout.devices_per_node,
                join=False,
                start_method=self.start_method,
            )
            workers = [
                Worker(layout.global_rank(index), index, process,
                       str(scratch / f"rank-{layout.global_rank(index)}.json"))
                for index, process in enumerate(context.processes)
            ]
            processes = Supervisor(workers, prefix=self.prefix)
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


@contextlib.contextmanager
def _scratch_directory(prefix: str) -> Iterator[Path]:
    path = _new_scratch_directory(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _process_entry(
    local_rank: int,
    launcher: MultiprocessingLauncher,
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
    launcher.children = LaunchedChildren()  # a forked rank must not see the launching process's children
    launcher.run_rank(_call_and_keep, (function, args, kwargs, global_rank, scratch), {}, global_rank,
                      layout.world_size)


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
