"""Real hivemind peers on 127.0.0.1: started as processes, watched through their sockets (``core.testing.sockets``),
stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest

from core.testing.sockets import SocketWatch

SCRIPTS = Path(__file__).parent / "scripts"
INITIAL_PEERS_ENV = "PL_INITIAL_PEERS"
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", INITIAL_PEERS_ENV)


def assert_loopback_only(watch: SocketWatch) -> None:
    """The watch saw the peers' sockets, p2pd's among them, and none outside 127.0.0.1."""
    watch.poll()
    assert watch.sockets, "no socket of the peers was seen: the watch is not looking at them"
    assert "p2pd" in watch.process_names(), f"p2pd was never seen among {sorted(watch.process_names())}"
    assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"


@attrs.define
class Peer:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@attrs.define
class Collaboration:
    """Peers of one run (``run_id``) under ``out``; the first one started is the others' entry point."""

    out: Path
    watch: SocketWatch
    options: dict[str, Any] = attrs.field(factory=dict)
    peers: dict[str, Peer] = attrs.field(factory=dict)
    initial_peers: str | None = None

    def start(self, name: str, **overrides: Any) -> Peer:
        config = {
            "out": str(self.out), "name": name, "run_id": f"test-{self.out.name}", "data_seed": len(self.peers),
            "batch_size": 8, "target_batch_size": 24, "epochs": 3, "matchmaking_time": 1.0,
            "averaging_timeout": 15.0, **self.options, **overrides,
        }
        (self.out / f"config-{name}.json").write_text(json.dumps(config))
        environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
        environment.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if self.initial_peers is not None:
            environment[INITIAL_PEERS_ENV] = self.initial_peers
        log = self.out / f"log-{name}.txt"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, str(SCRIPTS / "peer.py"), str(self.out / f"config-{name}.json")],
                stdout=sink, stderr=subprocess.STDOUT, env=environment, start_new_session=True,
            )
        peer = self.peers[name] = Peer(name, process, log)
        self.watch.watch(process.pid)
        if self.initial_peers is None:
            self.initial_peers = self._printed_maddrs(peer)
        return peer

    def _printed_maddrs(self, peer: Peer, timeout: float = 120) -> str:
        """The multiaddrs the first peer prints for the others (``PL_INITIAL_PEERS=...``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in peer.log.read_text(errors="replace").splitlines():
                if line.startswith(f"{INITIAL_PEERS_ENV}="):
                    return line.partition("=")[2]
            if peer.process.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"peer {peer.name} printed no {INITIAL_PEERS_ENV}= line:\n{peer.output()}")

    def wait_for_file(self, name: str, timeout: float = 150) -> Path:
        path = self.out / name
        deadline = time.monotonic() + timeout
        while not path.exists():
            crashed = [peer for peer in self.peers.values() if peer.process.poll() not in (None, 0)]
            if crashed or time.monotonic() > deadline:
                self.stop()
                logs = "\n".join(f"--- {peer.name}:\n{peer.output()}" for peer in self.peers.values())
                pytest.fail(f"{name} did not appear within {timeout} s:\n{logs}")
            time.sleep(0.05)
        return path

    def read(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.wait_for_file(name).read_text())
        return result

    def finish(self, name: str, timeout: float = 150) -> dict[str, Any]:
        """Wait for peer ``name`` to exit 0 and return its result."""
        peer = self.peers[name]
        try:
            peer.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"peer {name} did not finish within {timeout} s:\n{peer.output()}")
        assert peer.process.returncode == 0, f"peer {name} exited with {peer.process.returncode}:\n{peer.output()}"
        return self.read(f"result-{name}.json")

    def wait_for_epoch(self, name: str, epoch: int, timeout: float = 150) -> dict[str, Any]:
        """Wait until peer ``name`` reported reaching hivemind epoch ``epoch``; return its progress."""
        deadline = time.monotonic() + timeout
        while True:
            progress = self.read(f"progress-{name}.json")
            if progress["epoch"] >= epoch:
                return progress
            if self.peers[name].process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"peer {name} did not reach epoch {epoch} (at {progress}):\n{self.peers[name].output()}")
            time.sleep(0.05)

    def kill(self, name: str) -> None:
        """SIGKILL a peer and, by their PIDs, the p2pd daemon and anything else it started."""
        peer = self.peers[name]
        children = psutil.Process(peer.process.pid).children(recursive=True)
        os.kill(peer.process.pid, signal.SIGKILL)
        peer.process.wait(timeout=30)
        kill_all(children)

    def stop(self) -> None:
        """Stop every peer still running, and their children, by PID."""
        for peer in self.peers.values():
            if peer.process.poll() is None:
                try:
                    children = psutil.Process(peer.process.pid).children(recursive=True)
                except psutil.Error:
                    children = []
                peer.process.kill()
                peer.process.wait(timeout=30)
                kill_all(children)
        kill_all(self.watch.alive())  # anything a peer started and left behind (none when teardown works)


def kill_all(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(processes, timeout=10)
