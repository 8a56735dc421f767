"""See every internet socket the processes of a job open, to test that the job stays on loopback.

A test whose job must not be reachable from the network (a lighthouse, a Ray cluster, hivemind peers: daemons that
listen on every interface by default) watches the job's processes while it runs, then asserts that nothing was
outside 127.0.0.1::

    from core.testing.sockets import SocketWatch

    with SocketWatch() as watch:
        job = subprocess.Popen([...], start_new_session=True)
        watch.watch_group(job.pid)      # every process of the job's group, even those its parent left behind
        job.wait(timeout=60)
    assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"

The watch samples every ``interval`` seconds in a thread (and once more when it stops): a connection that lives
shorter than that can be missed, so a clean result says no long-lived socket was outside, not that no packet
ever left. A socket is *outside* when its local or remote address is neither loopback nor empty; an unspecified
local address (``0.0.0.0``, ``::``) listens on every interface, so it is outside too. One kind is excluded and
kept apart in :attr:`SocketWatch.resolver_lookups`: a UDP socket to port 53 of a nameserver of
``/etc/resolv.conf``. torch's c10d store formats the peer of each connection with ``getnameinfo``, and for the
IPv4-mapped ``::ffff:127.0.0.1`` glibc asks the resolver for its name (a PTR query ``/etc/hosts`` does not
answer), so every process that joins a store opens one: libc's lookup, not the job's traffic.

Needs ``psutil`` (``pip install psutil``); ``import core.testing`` does not import this module.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from core import CoreError

if TYPE_CHECKING:
    import psutil

__all__ = ["Socket", "SocketWatch", "is_outside_loopback", "nameservers"]

DNS_PORT = 53


class Socket(NamedTuple):
    """One socket seen on a watched process. Addresses are empty when the socket has none (not yet connected)."""

    pid: int
    process: str
    """The process's name (``p2pd``, ``raylet``, ``python``)."""
    kind: str
    """``"tcp"`` or ``"udp"``."""
    status: str
    """psutil's status: ``"LISTEN"``, ``"ESTABLISHED"``, ... and ``"NONE"`` for UDP."""
    local: str
    local_port: int
    remote: str
    remote_port: int


def nameservers(resolv_conf: Path = Path("/etc/resolv.conf")) -> frozenset[str]:
    """The addresses of the ``nameserver`` lines of ``resolv_conf``; empty when it cannot be read."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(line.split()[1] for line in lines if line.split()[:1] == ["nameserver"] and len(line.split()) > 1)


def is_outside_loopback(ip: str, *, local: bool = False) -> bool:
    """Whether a socket's address ``ip`` reaches beyond this machine's loopback.

    Empty (no address) is not outside; ``::ffff:127.0.0.1`` is loopback. With ``local=True`` an unspecified
    address (``0.0.0.0``, ``::``) is outside: a socket bound to it is reachable on every interface.
    """
    if not ip:
        return False
    address = ipaddress.ip_address(ip)
    plain = getattr(address, "ipv4_mapped", None) or address
    if plain.is_unspecified:
        return local
    return not plain.is_loopback


def _psutil() -> Any:
    try:
        import psutil
    except ImportError as error:
        raise CoreError(
            "core.testing.sockets.SocketWatch reads each process's sockets with psutil, which is not installed in "
            f"the environment at {sys.prefix}: add psutil to your test dependencies (pip install psutil)"
        ) from error
    return psutil


class SocketWatch:
    """Polls the sockets of the processes it is told to watch, in a thread, and records every one it sees.

    What it watches: :meth:`watch` (a process and all its descendants), :meth:`watch_group` (every process of
    a process group, so children re-parented when their parent died are still seen) and, with
    ``new_descendants=True``, every descendant of this process started after the watch was made (older ones
    belong to earlier tests of the same pytest process). Use it as a context manager, or :meth:`start` and
    :meth:`stop`; :meth:`poll` samples once more on demand (say, right before a job's processes exit).
    """

    def __init__(self, *, interval: float = 0.1, new_descendants: bool = False,
                 resolvers: frozenset[str] | None = None) -> None:
        if not interval > 0:
            raise CoreError(f"SocketWatch(interval={interval!r}): expected a number of seconds > 0")
        self._psutil = _psutil()
        self.interval = interval
        self.resolvers = nameservers() if resolvers is None else resolvers
        self.sockets: set[Socket] = set()
        """Every socket seen, resolver lookups excluded."""
        self.resolver_lookups: set[Socket] = set()
        """UDP sockets to port 53 of a nameserver of /etc/resolv.conf: libc's name lookups (see the module)."""
        self.processes: dict[int, psutil.Process] = {}
        """Every process seen, by PID."""
        self._names: set[str] = set()
        self._roots: list[psutil.Process] = []
        self._groups: set[int] = set()
        self._older: set[int] | None = None
        if new_descendants:
            self._older = {process.pid for process in self._psutil.Process().children(recursive=True)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        """Watch process ``pid`` and every process it starts (its descendants at each poll)."""
        with self._lock:
            self._roots.append(self._psutil.Process(pid))

    def watch_group(self, pgid: int) -> None:
        """Watch every process of process group ``pgid`` (a child started with ``start_new_session=True`` leads
        its own group, whose id is its PID)."""
        with self._lock:
            self._groups.add(pgid)

    def _watched(self) -> list[psutil.Process]:
        ps = self._psutil
        with self._lock:
            roots, groups = list(self._roots), set(self._groups)
        found: dict[int, psutil.Process] = {}
        for root in roots:
            with contextlib.suppress(ps.Error):
                if root.is_running():
                    for process in [root, *root.children(recursive=True)]:
                        found[process.pid] = process
        if self._older is not None:
            with contextlib.suppress(ps.Error):
                for process in ps.Process().children(recursive=True):
                    if process.pid not in self._older:
                        found[process.pid] = process
        if groups:
            for process in ps.process_iter():
                with contextlib.suppress(ps.Error, OSError):
                    if os.getpgid(process.pid) in groups:
                        found[process.pid] = process
        return list(found.values())

    def poll(self) -> None:
        """Sample the sockets of every watched process now."""
        for process in self._watched():
            try:
                name = process.name()
                connections = process.net_connections(kind="inet")
            except (self._psutil.Error, OSError):
                continue  # it exited between listing and reading, or is not ours to read
            seen = []
            for connection in connections:
                local, remote = connection.laddr, connection.raddr
                seen.append(Socket(
                    pid=process.pid, process=name, kind="udp" if connection.type == socket.SOCK_DGRAM else "tcp",
                    status=connection.status, local=local.ip if local else "", local_port=local.port if local else 0,
                    remote=remote.ip if remote else "", remote_port=remote.port if remote else 0,
                ))
            with self._lock:
                self.processes.setdefault(process.pid, process)
                self._names.add(name)
                for entry in seen:
                    lookup = entry.kind == "udp" and entry.remote in self.resolvers and entry.remote_port == DNS_PORT
                    (self.resolver_lookups if lookup else self.sockets).add(entry)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def start(self) -> SocketWatch:
        """Start polling in a daemon thread."""
        if self._thread is not None:
            raise CoreError("SocketWatch.start(): this watch already started; make a new SocketWatch per job")
        self._thread = threading.Thread(target=self._loop, name="core-socket-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling, after one last sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()

    def __enter__(self) -> SocketWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def outside(self) -> list[Socket]:
        """Every socket seen bound to, listening on every interface of, or connected to an address that is not
        loopback, sorted; resolver lookups are not among them."""
        with self._lock:
            entries = list(self.sockets)
        return sorted(entry for entry in entries
                      if is_outside_loopback(entry.local, local=True) or is_outside_loopback(entry.remote))

    def process_names(self) -> set[str]:
        """The names of every process seen (``p2pd`` when a hivemind peer's daemon was watched)."""
        with self._lock:
            return set(self._names)

    def alive(self, grace: float = 0.0) -> list[psutil.Process]:
        """The processes seen that still run after waiting up to ``grace`` seconds for them to exit (a PID reused
        by another process does not count)."""
        with self._lock:
            running = [process for process in self.processes.values() if process.is_running()]
        if grace:
            _, running = self._psutil.wait_procs(running, timeout=grace)
        return [process for process in running if process.is_running()]

