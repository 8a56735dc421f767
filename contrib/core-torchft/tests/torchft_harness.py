"""Replica groups and a lighthouse on 127.0.0.1 for the tests, each in its own process group, stopped by pid,
with every socket they open watched (``core.testing.sockets.SocketWatch``).

torchft's servers listen on every interface and advertise the host name by default: the groups here get
``CORE_TORCHFT_HOST=127.0.0.1`` (their manager server, their store and, set by the strategy itself, gloo's
interface) and the lighthouse ``--bind 127.0.0.1:0``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.testing.sockets import SocketWatch

SCRIPTS = Path(__file__).parent / "scripts"
HEARTBEAT_TIMEOUT_MS = 1000
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CORE_DDP_JOB",
                     "CORE_LISTEN_FD", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS", "TORCHFT_LIGHTHOUSE",
                     "CORE_TORCHFT_HOST", "GLOO_SOCKET_IFNAME")


def _stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM the process's group, SIGKILL it after 5 s."""
    if process.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def lighthouse(watch: SocketWatch, min_replicas: int = 1) -> Iterator[str]:
    """``python -m core_torchft.lighthouse`` on 127.0.0.1 (port 0); yields its address; stopped by pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", "core_torchft.lighthouse", "--bind", "127.0.0.1:0", "--min-replicas", str(min_replicas),
         "--join-timeout-ms", "1000", "--heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    watch.watch_group(process.pid)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        name, _, address = line.partition("=")
        assert name == "TORCHFT_LIGHTHOUSE" and address.startswith("http://127.0.0.1:"), line
        yield address
    finally:
        _stop(process)


def group_environment(address: str, groups: int) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    environment.update({
        "TORCHFT_LIGHTHOUSE": address, "NUM_REPLICA_GROUPS": str(groups), "CORE_TORCHFT_HOST": "127.0.0.1",
        "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
    })
    return environment


class Group:
    """One replica group: ``scripts/torchft_train.py`` in its own process group."""

    def __init__(self, out: Path, group: int, address: str, groups: int, watch: SocketWatch, *arguments: str) -> None:
        self.out = out
        self.log = out / f"group-{group}-{time.monotonic_ns()}.log"
        self.started = time.time()
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(SCRIPTS / "torchft_train.py"), str(out), *arguments],
                env={**group_environment(address, groups), "REPLICA_GROUP_ID": str(group)},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        watch.watch_group(self.process.pid)

    def record(self) -> dict[str, Any] | None:
        for path in glob.glob(str(self.out / f"group-*-{self.process.pid}.json")):
            with contextlib.suppress(OSError, ValueError):
                found: dict[str, Any] = json.loads(Path(path).read_text())
                return found
        return None

    def step(self) -> int:
        found = self.record()
        return int(found["timeline"][-1][1]) if found and found["timeline"] else -1

    def participants(self) -> int:
        """How many groups committed this group's last recorded step."""
        found = self.record()
        return int(found["timeline"][-1][2]) if found and found["timeline"] else 0

    def wait_for_step(self, step: int, timeout: float = 90, participants: int = 0) -> None:
        """Until this group has committed ``step`` (in a quorum of at least ``participants`` groups)."""
        deadline = time.monotonic() + timeout
        while self.step() < step or self.participants() < participants:
            if self.process.poll() is not None:
                raise AssertionError(f"the group exited ({self.process.returncode}):\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the group did not reach step {step} within {timeout} s:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        return self.log.read_text()[-5000:]

    def stop(self) -> None:
        _stop(self.process)
