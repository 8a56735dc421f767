"""A fork server for the migration programs: one interpreter that has imported torch, forked once per program run.

Each program still runs in a process of its own, a fork of the server: its own pid, command line
(``sys.argv``, ``sys.orig_argv``), environment, working directory, ``sys.path`` and output files, and it ends
as ``python program.py ARGS`` would (its ``atexit`` handlers run, an uncaught exception exits 1). What it does
not pay is ``import torch`` and ``import torch._dynamo`` (about 2 s of CPU of the 3-4 s a program run costs on the
CI machine). A program that starts more ranks starts them as fresh interpreters (the ddp launcher runs
``sys.orig_argv`` again), as it would under ``python``. torch is imported with the programs' own environment
(``OMP_NUM_THREADS=1``) and runs nothing before the fork, as a DataLoader's worker processes are forked from a parent
that imported torch.

Run as ``python _fork_server.py``: one JSON request a line on stdin, ``{"argv": [program, arg, ...], "cwd": ...,
"env": {...}, "stdout": path, "stderr": path}``; it answers ``{"pid": N}`` once the program's process exists and
``{"returncode": N}`` when it ended (negative: killed by that signal, as ``subprocess`` reports it).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

# What a program's own ``sys.path`` starts from: this interpreter's, without this script's directory.
BASE_PATH = sys.path[1:]


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> dict[str, Any] | None:
    """Fork one process per request and report on it; in the fork, return its request (None: stdin closed)."""
    while line := sys.stdin.readline():
        request: dict[str, Any] = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"returncode": os.waitstatus_to_exitcode(status)})
    return None


def become(request: dict[str, Any]) -> None:
    """In the fork: the program's files, directory, environment and command line, then the program as __main__."""
    descriptors = [
        os.open(os.devnull, os.O_RDONLY),
        os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
        os.close(descriptor)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    program = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.orig_argv = [sys.executable, *request["argv"]]
    sys.path[:] = [str(Path(program).resolve().parent), *BASE_PATH]
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    # What every program imports first, and nearly all of its start-up time: torch, and torch._dynamo, which
    # torch imports at a program's first optimizer (Optimizer.add_param_group is wrapped by torch._disable_dynamo):
    # about 1 s of CPU more per program. Neither starts a thread.
    import gc

    import torch
    import torch._dynamo
    import torch.distributed
    import torch.utils.data  # noqa: F401

    # Out of the cyclic garbage collector's reach in every fork: its collections while the program runs, and the
    # walk at its exit, skip what the server imported (the program's own objects are collected as usual).
    gc.freeze()
    request = serve()
    if request is not None:
        become(request)
