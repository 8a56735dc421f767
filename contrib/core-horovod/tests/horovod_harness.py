"""Running jobs under a real ``horovodrun`` on 127.0.0.1 and watching every socket their processes open
(``core.testing.sockets``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import psutil
import pytest

from core.testing.sockets import Socket, SocketWatch

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
    outside: tuple[Socket, ...]  # every socket seen off loopback (core.testing.sockets), resolver lookups aside

    def non_loopback(self) -> list[Socket]:
        return list(self.outside)


def run_horovod(arguments: Sequence[str], np: int = 2, timeout: float = 180) -> Finished:
    """``horovodrun -np N -H localhost:N --gloo --network-interface lo ARGUMENTS``, its sockets watched meanwhile."""
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    command = [*horovodrun(), "-np", str(np), "-H", f"localhost:{np}", "--gloo", "--network-interface", "lo",
               "--start-timeout", "60", *arguments]
    with SocketWatch() as watch:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environment, start_new_session=True)
        watch.watch(process.pid)
        try:
            output = process.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:  # a hang fails the test; everything the job started goes with it
            for child in watch.alive():
                if child.pid != process.pid:
                    with contextlib.suppress(psutil.Error):
                        child.kill()
            process.kill()
            output = process.communicate()[0]
            pytest.fail(f"horovodrun did not finish within {timeout} s:\n{output[-4000:]}")
    return Finished(process.returncode, output, tuple(watch.outside()))
