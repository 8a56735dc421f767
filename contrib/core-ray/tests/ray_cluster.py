"""A real Ray cluster on 127.0.0.1 for the tests: started with private ports and a private directory, stopped by
its process ids (never ``ray stop``, which stops every Ray process on the machine by name); the tests watch every
socket its processes and their jobs open with ``core.testing.sockets.SocketWatch``.

Ray rewrites ``--node-ip-address=127.0.0.1`` to the machine's network address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set, and a driver needs ``RAY_AUTH_MODE=token`` (with the cluster's
token) to join a head started with token authentication: both are in :attr:`RayCluster.environment`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import psutil

from core.testing.sockets import SocketWatch

RAY = str(Path(sys.executable).with_name("ray"))
SCRIPTS = Path(__file__).parent / "scripts"
# Ray puts its sockets at TEMP_DIR/session_<date>_<time>_<microseconds>_<pid>/sockets/plasma_store, and an AF_UNIX
# path holds at most 107 bytes: with a 7-digit pid that leaves 43 for TEMP_DIR. pytest's tmp_path does not fit once
# its counter reaches 4 digits (/tmp/pytest-of-root/pytest-1272/popen-gw0/ray0 is 46), hence a directory of our own.
_RAY_SOCKET_SUFFIX = len("/session_2026-11-28_10-50-50_538245_1234567/sockets/plasma_store")
_UNIX_PATH_MAX = 107
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "LOCAL_WORLD_SIZE", "CORE_GLOBAL_SEED", "CORE_DDP_JOB", "CORE_LISTEN_FD", "RAY_ADDRESS")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    if len(str(directory)) + _RAY_SOCKET_SUFFIX > _UNIX_PATH_MAX:
        raise RuntimeError(
            f"{directory} is too long for Ray's socket paths ({len(str(directory))} bytes; at most "
            f"{_UNIX_PATH_MAX - _RAY_SOCKET_SUFFIX} leave room for session_.../sockets/plasma_store in an AF_UNIX "
            "path): set TMPDIR to a shorter directory, such as /tmp"
        )
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
def running_cluster(num_cpus: int = 4) -> Iterator[RayCluster]:
    """A cluster in a new directory under the system's temporary one; stopped, and the directory removed, at the end."""
    directory = Path(tempfile.mkdtemp(prefix="core-ray-"))
    try:
        cluster = start_cluster(directory, num_cpus)
        try:
            yield cluster
        finally:
            stop_cluster(cluster)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


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
    watch.watch_group(process.pid)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"the driver did not finish within {timeout} s:\n{output[-6000:]}") from None
    return Finished(process.returncode, output, time.monotonic() - started)
