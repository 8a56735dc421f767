"""A real Ray cluster on 127.0.0.1 for the tests: started with private ports and a private directory, stopped by
its process ids (never ``ray stop``, which stops every Ray process on the machine by name), and a watch over
every socket its processes and the test's jobs open.

Ray rewrites ``--node-ip-address=127.0.0.1`` to the machine's network address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set, and a driver needs ``RAY_AUTH_MODE=token`` (with the cluster's
token) to join a head started with token authentication: both are in :attr:`RayCluster.environment`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import psutil

RAY = str(Path(sys.executable).with_name("ray"))
SCRIPTS = Path(__file__).parent / "scripts"
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "LOCAL_WORLD_SIZE", "CORE_GLOBAL_SEED", "CORE_DDP_JOB", "CORE_LISTEN_FD", "RAY_ADDRESS")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def outside_loopback(ip: str) -> bool:
    if not ip:
        return False
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is loopback too
    return not (mapped or address).is_loopback and not (mapped or address).is_unspecified


@attrs.define
class SocketWatch:
    """Every (pid, status, local ip, remote ip) seen on the processes of some process groups and their children."""

    groups: set[int]
    roots: set[int]
    seen: set[tuple[int, str, str, str]] = attrs.field(factory=set)
    listening_anywhere: set[tuple[int, str]] = attrs.field(factory=set)
    _stop: threading.Event = attrs.field(factory=threading.Event)
    _thread: threading.Thread | None = None

    def processes(self) -> list[psutil.Process]:
        found = {}
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(process.pid) in self.groups:
                    found[process.pid] = process
        for pid in list(self.roots):
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                for process in [root, *root.children(recursive=True)]:
                    found[process.pid] = process
        return list(found.values())

    def poll(self) -> None:
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                for connection in process.net_connections(kind="inet"):
                    local = connection.laddr.ip if connection.laddr else ""
                    remote = connection.raddr.ip if connection.raddr else ""
                    self.seen.add((process.pid, connection.status, local, remote))
                    if connection.status == psutil.CONN_LISTEN and local in ("0.0.0.0", "::"):
                        self.listening_anywhere.add((process.pid, local))

    def start(self) -> SocketWatch:
        def loop() -> None:
            while not self._stop.is_set():
                self.poll()
                self._stop.wait(0.2)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()

    def outside(self) -> list[tuple[int, str, str, str]]:
        """Sockets bound to, listening on every interface of, or connected to an address that is not loopback."""
        return sorted(
            entry for entry in self.seen
            if outside_loopback(entry[2]) or outside_loopback(entry[3])
        ) + sorted((pid, "LISTEN on every interface", ip, "") for pid, ip in self.listening_anywhere)


@attrs.frozen
class RayCluster:
    """A head node started by ``ray start --head`` on 127.0.0.1; its daemons share one process group."""

    address: str
    temp_dir: Path
    group: int
    environment: dict[str, str]
    num_cpus: int

    def pids(self) -> list[int]:
        found = set()
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(process.pid) == self.group and process.status() != psutil.STATUS_ZOMBIE:
                    found.add(process.pid)
                    found.update(child.pid for child in process.children(recursive=True))
        return sorted(found)

    def job_environment(self) -> dict[str, str]:
        """This process's environment without ranks, plus what a driver needs to join this cluster."""
        environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
        environment.update(self.environment)
        environment.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        return environment


def start_cluster(directory: Path, num_cpus: int = 4) -> RayCluster:
    """``ray start --head`` on 127.0.0.1 with private ports and ``directory`` as its temporary directory."""
    token = uuid.uuid4().hex
    environment = {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # keep 127.0.0.1 (else Ray advertises the network address)
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,  # in the environment: nothing written to ~/.ray
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
        "--temp-dir", str(directory), "--include-dashboard", "false", "--disable-usage-stats",
        "--num-cpus", str(num_cpus), "--num-gpus", "0",
        # Ports that default to fixed numbers, which two clusters on one machine would both want.
        "--ray-client-server-port", str(free_port()), "--dashboard-port", str(free_port()),
        "--dashboard-agent-listen-port", str(free_port()),
    ]
    starter = subprocess.Popen(
        command, env={**os.environ, **environment}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    cluster = RayCluster(f"127.0.0.1:{port}", directory, starter.pid, {**environment, "RAY_ADDRESS":
                                                                        f"127.0.0.1:{port}"}, num_cpus)
    try:
        output, _ = starter.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        stop_cluster(cluster)
        raise
    if starter.returncode != 0:
        stop_cluster(cluster)
        raise RuntimeError(f"ray start failed ({starter.returncode}):\n{output[-4000:]}")
    return cluster


def stop_cluster(cluster: RayCluster, grace: float = 3.0) -> list[int]:
    """SIGTERM every process of the cluster, SIGKILL what is left after ``grace`` seconds; returns the pids."""
    pids = cluster.pids()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and cluster.pids():
        time.sleep(0.1)
    for pid in cluster.pids():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return pids


@contextlib.contextmanager
def cluster_at(directory: Path, num_cpus: int = 4) -> Iterator[RayCluster]:
    cluster = start_cluster(directory, num_cpus)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@attrs.frozen
class Finished:
    returncode: int
    output: str
    seconds: float


def run_driver(
    cluster: RayCluster, arguments: Sequence[str], watch: SocketWatch, timeout: float = 150,
    environment: dict[str, str] | None = None,
) -> Finished:
    """Run ``python ARGUMENTS`` as a Ray driver of ``cluster``, its sockets watched; a hang fails the test."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, *arguments], env={**cluster.job_environment(), **(environment or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    watch.groups.add(process.pid)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"the driver did not finish within {timeout} s:\n{output[-6000:]}") from None
    return Finished(process.returncode, output, time.monotonic() - started)
