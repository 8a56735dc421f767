"""``python -m core.run``: start a script's processes the way torchrun would, and stop them all on a failure.

    python -m core.run --accelerator cpu --strategy ddp --devices 2 train.py --lr 0.1
    python -m core.run --devices 2 --num-nodes 2 --node-rank 1 --main-address 10.0.0.1 --main-port 29500 train.py

The launcher resolves the options (so a typo fails here, with the usual message), starts one process per
device of this node with ``LOCAL_RANK`` / ``RANK`` / ``WORLD_SIZE`` / ``NODE_RANK`` / ``MASTER_ADDR`` /
``MASTER_PORT`` set, and watches them. When one fails, every other is killed at once and the launcher
exits with status 1 after printing which rank failed and its traceback or signal. It also exports
``CORE_ACCELERATOR`` / ``CORE_STRATEGY`` / ``CORE_DEVICES`` / ``CORE_NUM_NODES`` / ``CORE_PRECISION`` for the
script to use as its defaults.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Final

from core._errors import CoreError
from core.toolkit._listeners import LISTEN_FD_VARIABLE, bind_listener
from core.toolkit._supervisor import PREEMPTED_EXIT_CODE, Supervisor, start_worker

PREFIX: Final = "core.run"
DEFAULT_MULTI_NODE_PORT: Final = 29500


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
    parser.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    parser.add_argument("script", help="the script (or module, with -m) to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return parser


def processes_per_node(accelerator: str, strategy: str, devices: str, num_nodes: int) -> int:
    """How many processes this node runs, from the resolved configuration (validates the options)."""
    from core._traits import traits_of
    from core.registry._resolver import resolve

    active = resolve(accelerator=accelerator, strategy=strategy, devices=devices, num_nodes=num_nodes)
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


def _stop_on_signal(supervisor: Supervisor) -> None:
    def handler(number: int, frame: FrameType | None) -> None:
        stopped = supervisor.stop()
        print(f"{PREFIX}: received {signal.Signals(number).name}; stopped global rank(s) {stopped}.",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, handler)


def launch(options: argparse.Namespace) -> int:
    """Start the processes of this node, wait, and return the exit status of the job."""
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
    base = dict(os.environ)
    if nprocs > 1:
        base.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: N processes must not each use every core
    with tempfile.TemporaryDirectory(prefix="core-run-") as scratch:
        workers = []
        for local_rank in range(nprocs):
            global_rank = options.node_rank * nprocs + local_rank
            environment = {**base, **worker_environment(options, local_rank, nprocs, port)}
            error_file = str(Path(scratch) / f"rank-{global_rank}.json")
            handed = [listener.fileno()] if listener is not None and global_rank == 0 else []
            if handed:
                environment[LISTEN_FD_VARIABLE] = str(handed[0])
            workers.append(start_worker(command, environment, global_rank, local_rank, error_file, pass_fds=handed))
        if listener is not None:
            listener.close()  # global rank 0 holds its own copy
        supervisor = Supervisor(workers, prefix=PREFIX)
        _stop_on_signal(supervisor)
        found = supervisor.wait()
        stopped = supervisor.stop()
        if found:
            print(supervisor.report(found, stopped), file=sys.stderr, flush=True)
            return 1
        if any(worker.exit_code() == PREEMPTED_EXIT_CODE for worker in workers):
            print(f"{PREFIX}: the job stopped on a preemption notice after saving; run the same command again to "
                  f"resume.", file=sys.stderr, flush=True)
            return PREEMPTED_EXIT_CODE
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        return launch(options)
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
