"""``python -m core_horovod.run``: ``horovodrun``, with its servers bound to 127.0.0.1 on one machine.

``horovodrun`` starts an HTTP rendezvous server (and, for remote hosts, task services) on a random port of
*every* interface: on a shared node anyone who can reach the machine can reach it while a job runs. When every
host of the job is this machine (``-H localhost:N``, ``-H 127.0.0.1:N`` or no ``-H``), this wrapper makes
those servers listen on 127.0.0.1 only; ``--bind ADDRESS`` picks another address; with remote hosts nothing
changes (they must reach the servers). The arguments are horovodrun's::

    python -m core_horovod.run -np 2 -H localhost:2 --gloo --network-interface lo python train.py
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

_FIND_PORT_USERS: Final = (
    "horovod.runner.util.network",
    "horovod.runner.http.http_server",
    "horovod.runner.common.util.network",
)
LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def hosts_of(arguments: Sequence[str]) -> list[str]:
    """The host names of ``-H`` / ``--hosts`` (``a:2,b:2``), empty when the job names none."""
    for index, argument in enumerate(arguments):
        if argument in ("-H", "--hosts") and index + 1 < len(arguments):
            return [entry.rsplit(":", 1)[0] for entry in arguments[index + 1].split(",") if entry]
        if argument.startswith("--hosts="):
            return [entry.rsplit(":", 1)[0] for entry in argument.split("=", 1)[1].split(",") if entry]
    return []


def bind_address(arguments: Sequence[str], explicit: str | None) -> str | None:
    """The address horovodrun's servers should listen on, or None to leave horovodrun's default (all)."""
    if explicit is not None:
        return explicit
    hosts = hosts_of(arguments)
    return "127.0.0.1" if all(host in LOCAL_HOSTS for host in hosts) else None


def _find_port_on(address: str) -> Callable[[Callable[[tuple[str, int]], Any]], tuple[Any, int]]:
    def find_port(server_factory: Callable[[tuple[str, int]], Any]) -> tuple[Any, int]:
        """horovod.runner.util.network.find_port, on ``address`` instead of every interface."""
        first = random.randrange(1024, 65536)
        for offset in range(65536 - 1024):
            port = 1024 + (first - 1024 + offset) % (65536 - 1024)
            try:
                return server_factory((address, port)), port
            except OSError:
                continue
        raise RuntimeError(f"no free port on {address} for horovodrun's servers")

    return find_port


def bind_servers(address: str) -> None:
    """Make horovodrun's rendezvous, key-value and task servers listen on ``address`` only."""
    find_port = _find_port_on(address)
    for name in _FIND_PORT_USERS:
        setattr(importlib.import_module(name), "find_port", find_port)  # noqa: B010 (each imported it by name)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    explicit = None
    if arguments[:1] == ["--bind"] and len(arguments) > 1:
        explicit, arguments = arguments[1], arguments[2:]
    address = bind_address(arguments, explicit)
    if address is not None:
        bind_servers(address)
    sys.argv = ["horovodrun", *arguments]
    importlib.import_module("horovod.runner.launch").run_commandline()


if __name__ == "__main__":
    main()
