"""What runs inside each Ray actor: one rank of a job started by the ``ray`` launcher.

The class is plain Python; the launcher turns it into an actor class with ``ray.remote`` when a job starts, so
importing this module never imports Ray.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.toolkit import LISTEN_FD_VARIABLE, bind_listener

from ._environment import GLOBAL_RANK

# Whether a launched function is running in this actor, and the exception that was in flight when it started
# (None unless the launch itself happened while handling one).
_running: list[BaseException | None] = []


def failing() -> bool:
    """Whether a rank function runs in this actor and an exception is escaping it."""
    current = sys.exc_info()[1]
    return bool(_running) and current is not None and current is not _running[-1]


class RankWorker:
    """One rank: reports where it runs, opens the rendezvous (global rank 0), then runs the launched function."""

    def __init__(self) -> None:
        self._listener: socket.socket | None = None

    def describe(self) -> dict[str, Any]:
        """The node and process this actor runs in, and the GPUs Ray assigned to it."""
        import ray

        return {
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
        }

    def open_rendezvous(self, address: str) -> int:
        """Bind the rendezvous port on this node (port 0: the OS picks, no race) and return it.

        The listening socket is handed to the strategy's store under ``LISTEN_FD_VARIABLE`` when the rank runs
        (core-ddp's serving rank takes it with ``core.toolkit.take_inherited_listener``).
        """
        self._listener = bind_listener(address, 0)
        return int(self._listener.getsockname()[1])

    def run(
        self,
        variables: Mapping[str, str],
        working_directory: str,
        payload: tuple[Callable[..., Any], Sequence[Any], Mapping[str, Any]],
    ) -> Any:
        """Run the launched function as the rank ``variables`` describe; global rank 0's result comes back."""
        os.environ.update(variables)
        if os.path.isdir(working_directory):  # relative paths mean what they mean in the launching process
            os.chdir(working_directory)
        if self._listener is not None:
            os.environ[LISTEN_FD_VARIABLE] = str(self._listener.detach())  # the store owns it from here on
            self._listener = None
        function, args, kwargs = payload
        _running.append(sys.exc_info()[1])
        try:
            result = function(*args, **kwargs)
        finally:
            _running.pop()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
        return result if variables[GLOBAL_RANK] == "0" else None
