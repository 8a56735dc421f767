"""``python -m core.run``: start a script's processes the way torchrun would, and stop them all on a failure.

    python -m core.run --accelerator cpu --strategy ddp --devices 2 train.py --lr 0.1
    python -m core.run --devices 2 --num-nodes 2 --node-rank 1 --main-address 10.0.0.1 --main-port 29500 train.py

The launcher resolves the options (so a typo fails here, with the usual message), starts one process per
device of this node with ``LOCAL_RANK`` / ``RANK`` / ``WORLD_SIZE`` / ``NODE_RANK`` / ``MASTER_ADDR`` /
``MASTER_PORT`` set, and watches them. When one fails, every other is killed at once and the launcher
exits with status 1 after printing which rank failed and its traceback or signal. It also exports
``CORE_ACCELERATOR`` / ``CORE_STRATEGY`` / ``CORE_DEVICES`` / ``CORE_NUM_NODES`` / ``CORE_PRECISION`` for the
script to use as its defaults.

A preemption notice (``SIGTERM``, ``SIGUSR1`` or ``SIGUSR2`` by default: ``--preemption-signals``) is passed on
to the ranks, which agree on a step, save and exit 75 (``core.fault_tolerance``); the launcher then exits 75.
SLURM signals every process of a step, so the ranks may hear it twice: once from SLURM, once from here; the
ranks' handlers count one notice. A second signal, or ranks still running ``--grace-period`` seconds later,
stops them hard. ``SIGINT`` (Ctrl-C) stops the job at once unless it is listed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Final

from core._errors import CoreError
from core.toolkit._listeners import LISTEN_FD_VARIABLE, bind_listener
from core.toolkit._supervisor import POLL_INTERVAL, PREEMPTED_EXIT_CODE, Failure, Supervisor, Worker, start_worker

PREFIX: Final = "core.run"
DEFAULT_MULTI_NODE_PORT: Final = 29500
DEFAULT_PREEMPTION_SIGNALS: Final = "TERM,USR1,USR2"
"""What SLURM sends (``TERM`` at preemption and the time limit, ``USR1``/``USR2`` by ``--signal``), and the
default of ``ResumableCheckpoints`` / ``FaultTolerance`` (``SIGTERM``)."""
DEFAULT_GRACE_PERIOD: Final = 20.0
"""Seconds the ranks have to save and stop after a notice: well under SLURM's default KillWait of 30 s."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core.run",
        description="Run a training script in one process per device, as torchrun would, and stop every "
                    "process as soon as one fails.",
    )
    parser.add_argument("--accelerator", default="auto", help="accelerator alias (default: auto)")
    parser.add_argument("--strategy", default="auto", help="strategy alias (default: auto, i.e. ddp for >1 device)")
    parser.add_argument("--devices", default="1", help="devices per node: a count, indices '0,1', or -1 (default: 1)")
    parser.add_argument("--num-nodes", type=int, default=1, help="number of nodes (default: 1)")
    parser.add_argument("--node-rank", type=int, default=0, help="rank of this node, 0..num_nodes-1 (default: 0)")
    parser.add_argument("--main-address", default="127.0.0.1", help="address of node 0 (default: 127.0.0.1)")
    parser.add_argument("--main-port", type=int, default=None,
                        help=f"port on node 0 (default: a free port on one node, {DEFAULT_MULTI_NODE_PORT} otherwise)")
    parser.add_argument("--precision", default=None, help="precision alias exported to the script")
    parser.add_argument("--preemption-signals", type=preemption_signals, default=DEFAULT_PREEMPTION_SIGNALS,
                        help="signals passed on to the ranks as a preemption notice, so that they save and stop "
                             "(exit 75): the script's preemption_signals, comma-separated, or 'none' "
                             f"(default: {DEFAULT_PREEMPTION_SIGNALS})")
    parser.add_argument("--grace-period", type=grace_period, default=DEFAULT_GRACE_PERIOD,
                        help="seconds the ranks have to save and stop after a preemption notice before they are "
                             f"killed (default: {DEFAULT_GRACE_PERIOD:g}; SLURM's KillWait is 30)")
    parser.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    parser.add_argument("script", help="the script (or module, with -m) to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return parser


def processes_per_node(accelerator: str, strategy: str, devices: str, num_nodes: int) -> int:
    """How many processes this node runs, from the resolved configuration (validates the options)."""
    from core._traits import traits_of
    from core.registry._resolver import resolve

    # The ranks' environment is `local`: this launcher starts them, whatever started the launcher (one srun task).
    active = resolve(accelerator=accelerator, strategy=strategy, devices=devices, num_nodes=num_nodes,
                     plugins=["local"])
    # A strategy that drives several devices from one process (``dp``) says so; the rest run one per device.
    if not traits_of(active.strategy, "strategy").process_per_device:
        return 1
    return active.config.devices_per_node


def _main_port(options: argparse.Namespace) -> int:
    if options.main_port is not None:
        return int(options.main_port)
    if options.num_nodes > 1:
        return DEFAULT_MULTI_NODE_PORT
    from core.toolkit import find_free_port

    return find_free_port(options.main_address)


SCHEDULER_TASK_VARIABLES: Final = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
)
"""The task layout of the scheduler step that runs the launcher (``srun python -m core.run``): the launcher's,
not its ranks'. Left out of the ranks' environments, so that they read their ranks from this launcher; the rest
(``SLURM_JOB_ID``, the node list) stays."""


def worker_environment(options: argparse.Namespace, local_rank: int, nprocs: int, port: int) -> dict[str, str]:
    """The variables of one local rank: torchrun's names, plus the options as the script's defaults."""
    environment = {
        "MASTER_ADDR": options.main_address,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nprocs * options.num_nodes),
        "NODE_RANK": str(options.node_rank),
        "GROUP_RANK": str(options.node_rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(nprocs),
        "RANK": str(options.node_rank * nprocs + local_rank),
        "CORE_ACCELERATOR": options.accelerator,
        "CORE_STRATEGY": options.strategy,
        "CORE_DEVICES": options.devices,
        "CORE_NUM_NODES": str(options.num_nodes),
    }
    if options.precision is not None:
        environment["CORE_PRECISION"] = options.precision
    return environment


def preemption_signals(text: str) -> tuple[signal.Signals, ...]:
    """``--preemption-signals``: ``'TERM,USR1'`` (names with or without ``SIG``, or numbers), or ``'none'``."""
    if text.strip().lower() in ("", "none"):
        return ()
    found: list[signal.Signals] = []
    for item in (part.strip() for part in text.split(",")):
        name = item.upper() if item.upper().startswith("SIG") else f"SIG{item.upper()}"
        try:
            number = signal.Signals(int(item)) if item.isdigit() else signal.Signals[name]
        except (KeyError, ValueError):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a signal: expected names such as TERM,USR1,USR2 (or numbers), or 'none'"
            ) from None
        if number in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            raise argparse.ArgumentTypeError(f"{number.name} cannot announce a preemption: it cannot be handled")
        found.append(number)
    return tuple(dict.fromkeys(found))


def grace_period(text: str) -> float:
    """``--grace-period``: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


class SignalRelay:
    """The launcher's signal handlers, from before the first rank starts until the job ends.

    The first preemption notice goes on to every rank still running (the ranks may have heard it already:
    SLURM signals every process of a step; a rank counts one notice however often it arrives) and starts the
    grace period. Any other handled signal (``SIGINT``, ``SIGTERM`` when not listed), or a second one, stops
    the ranks hard: ``SIGKILL`` through the supervisor, and the launcher exits with ``128 + signal``.
    """

    def __init__(self, preemption: Sequence[signal.Signals], grace_period: float) -> None:
        self.preemption = tuple(preemption)
        self.grace_period = grace_period
        self.workers: list[Worker] = []
        self.notice: signal.Signals | None = None
        """The preemption signal received first; ``None`` while there was none."""
        self._deadline = float("inf")
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for number in dict.fromkeys((signal.SIGINT, signal.SIGTERM, *self.preemption)):
            self._previous[number] = signal.signal(number, self._on_signal)

    def uninstall(self, *, ignore_late_notices: bool = False) -> None:
        """Restore the handlers found at :meth:`install`; with ``ignore_late_notices``, ignore the preemption
        signals instead (for a launcher that exits next: the job's status is known, and a notice landing while it
        exits, such as SLURM's time-limit warning, would otherwise end it with that signal instead of its status)."""
        for number, previous in self._previous.items():
            if ignore_late_notices and number in self.preemption:
                signal.signal(number, signal.SIG_IGN)
            else:
                signal.signal(number, previous if previous is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        self._previous.clear()

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        received = signal.Signals(number)
        if received in self.preemption and self.notice is None:
            self.notice = received
            self._deadline = time.monotonic() + self.grace_period
            passed_to = self._pass_on(received)
            print(f"{PREFIX}: received {received.name}, a preemption notice; passed it on to global rank(s) "
                  f"{passed_to}, which save and stop at their next step (exit status {PREEMPTED_EXIT_CODE}). A "
                  f"second signal, or ranks still running in {self.grace_period:g} s, kills them.",
                  file=sys.stderr, flush=True)
            return
        stopped = Supervisor(self.workers, prefix=PREFIX).stop()
        if self.notice is None:
            print(f"{PREFIX}: received {received.name}; stopped global rank(s) {stopped}.", file=sys.stderr, flush=True)
        else:
            print(f"{PREFIX}: received {received.name} while the ranks were saving after {self.notice.name}; killed "
                  f"global rank(s) {stopped}. The run resumes from its newest complete checkpoint, if any.",
                  file=sys.stderr, flush=True)
        raise SystemExit(128 + number)

    def _pass_on(self, received: signal.Signals) -> list[int]:
        passed_to = []
        for worker in self.workers:
            if worker.exit_code() is None:  # an exited rank's pid may already belong to another process
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, received)
                    passed_to.append(worker.global_rank)
        return passed_to

    def wait(self, supervisor: Supervisor) -> list[Failure]:
        """As :meth:`Supervisor.wait`, but return ``[]`` also once the grace period after a notice has run out."""
        while not (found := supervisor.failures()) and supervisor.running():
            if time.monotonic() > self._deadline:
                return []
            time.sleep(POLL_INTERVAL)
        return found

    def explain(self, found: Sequence[Failure]) -> str:
        """What a failure after a notice means, for the report."""
        assert self.notice is not None
        killed = [failure.global_rank for failure in found if failure.exit_code == -self.notice]
        if killed:
            return (f"{PREFIX}: global rank(s) {killed} were ended by {self.notice.name} itself: the script does not "
                    f"treat it as a preemption notice. List it in ResumableCheckpoints / FaultTolerance "
                    f"preemption_signals, or leave it out of --preemption-signals.")
        return f"{PREFIX}: this happened after {self.notice.name}, a preemption notice passed on to the ranks."


def launch(options: argparse.Namespace, *, exiting: bool = False) -> int:
    """Start the processes of this node, wait, and return the exit status of the job.

    ``exiting``: the process exits with that status next (the command line), so preemption notices arriving after
    the job's end are ignored rather than restored to their previous handlers."""
    if not 0 <= options.node_rank < options.num_nodes:
        raise CoreError(f"--node-rank {options.node_rank} is outside 0..{options.num_nodes - 1} "
                        f"(--num-nodes {options.num_nodes}).")
    nprocs = processes_per_node(options.accelerator, options.strategy, options.devices, options.num_nodes)
    listener = None
    if options.main_port is None and options.num_nodes == 1:
        # Bound here, before any rank starts, and handed to global rank 0 for its store: no other program can
        # take the port between its choice and its use (see core.toolkit.bind_listener).
        listener = bind_listener(options.main_address, 0)
        port = int(listener.getsockname()[1])
    else:
        port = _main_port(options)
    target = ["-m", options.script] if options.module else [options.script]
    command = [sys.executable, *target, *options.script_args]
    base = {name: value for name, value in os.environ.items() if name not in SCHEDULER_TASK_VARIABLES}
    if nprocs > 1:
        base.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: N processes must not each use every core
    relay = SignalRelay(options.preemption_signals, options.grace_period)
    relay.install()
    try:
        with tempfile.TemporaryDirectory(prefix="core-run-") as scratch:
            for local_rank in range(nprocs):
                global_rank = options.node_rank * nprocs + local_rank
                environment = {**base, **worker_environment(options, local_rank, nprocs, port)}
                error_file = str(Path(scratch) / f"rank-{global_rank}.json")
                handed = [listener.fileno()] if listener is not None and global_rank == 0 else []
                if handed:
                    environment[LISTEN_FD_VARIABLE] = str(handed[0])
                relay.workers.append(
                    start_worker(command, environment, global_rank, local_rank, error_file, pass_fds=handed)
                )
            if listener is not None:
                listener.close()  # global rank 0 holds its own copy
            return job_status(relay, Supervisor(relay.workers, prefix=PREFIX))
    finally:
        relay.uninstall(ignore_late_notices=exiting)


def job_status(relay: SignalRelay, supervisor: Supervisor) -> int:
    """Wait for the ranks, stop what is left, say what happened and return the launcher's exit status."""
    found = relay.wait(supervisor)
    stopped = supervisor.stop()
    if found:
        print(supervisor.report(found, stopped), file=sys.stderr, flush=True)
        if relay.notice is not None:
            print(relay.explain(found), file=sys.stderr, flush=True)
        return 1
    if stopped:  # only a notice's grace period running out leaves ranks to stop without a failure
        assert relay.notice is not None
        print(f"{PREFIX}: the ranks did not stop within --grace-period {relay.grace_period:g} s of "
              f"{relay.notice.name}; killed global rank(s) {stopped}. The run resumes from its newest complete "
              f"checkpoint, if any.", file=sys.stderr, flush=True)
        return 128 + relay.notice
    if any(worker.exit_code() == PREEMPTED_EXIT_CODE for worker in supervisor.workers):
        print(f"{PREFIX}: the job stopped on a preemption notice after saving; run the same command again to "
              f"resume.", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT_CODE
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``python -m core.run``, ``core-run``): the job's exit status, for the caller to exit with."""
    options = build_parser().parse_args(argv)
    try:
        return launch(options, exiting=True)
    except CoreError as error:
        print(f"{PREFIX}: error: {error}", file=sys.stderr)
        return 2


def _exit(status: int) -> None:
    """Exit with ``status``; after a failure, without the interpreter's finalization (slow with torch loaded),
    so that the launcher, the last process of the failed job, is gone at once."""
    if status == 0:
        sys.exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit(main())
