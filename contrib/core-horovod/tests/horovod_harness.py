"""Running jobs under a real ``horovodrun`` on 127.0.0.1 and watching every socket their processes open."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import psutil
import pytest

SCRIPTS = Path(__file__).parent / "scripts"
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CORE_GLOBAL_SEED")


def horovodrun() -> list[str]:
    """horovodrun through core-horovod's wrapper, which binds its servers to 127.0.0.1 on one machine."""
    if shutil.which("horovodrun", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("Horovod is not installed here: python -m core_horovod.install")
    return [sys.executable, "-m", "core_horovod.run"]


@attrs.frozen
class Finished:
    returncode: int
    output: str
    addresses: frozenset[tuple[str, str, str]]  # (status, local ip, remote ip) of every socket seen

    def non_loopback(self) -> list[tuple[str, str, str]]:
        def outside(ip: str) -> bool:
            if not ip:
                return False
            address = ipaddress.ip_address(ip)
            mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is loopback too
            return not (mapped or address).is_loopback

        return sorted(entry for entry in self.addresses if outside(entry[1]) or outside(entry[2]))


def _sockets(root: psutil.Process) -> set[tuple[str, str, str]]:
    seen: set[tuple[str, str, str]] = set()
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return seen
    for process in processes:
        try:
            for connection in process.net_connections(kind="inet"):
                local = connection.laddr.ip if connection.laddr else ""
                remote = connection.raddr.ip if connection.raddr else ""
                seen.add((connection.status, local, remote))
        except psutil.Error:
            continue
    return seen


def run_horovod(arguments: Sequence[str], np: int = 2, timeout: float = 180) -> Finished:
    """``horovodrun -np N -H localhost:N --gloo --network-interface lo ARGUMENTS``, sockets polled meanwhile."""
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    command = [*horovodrun(), "-np", str(np), "-H", f"localhost:{np}", "--gloo", "--network-interface", "lo",
               "--start-timeout", "60", *arguments]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=environment, start_new_session=True)
    root = psutil.Process(process.pid)
    addresses: set[tuple[str, str, str]] = set()
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        addresses |= _sockets(root)
        time.sleep(0.1)
    if process.poll() is None:  # a hang fails the test; everything the job started goes with it
        for child in root.children(recursive=True):
            child.kill()
        process.kill()
        output = process.communicate()[0]
        pytest.fail(f"horovodrun did not finish within {timeout} s:\n{output[-4000:]}")
    output = process.communicate()[0]
    return Finished(process.returncode, output, frozenset(addresses))
