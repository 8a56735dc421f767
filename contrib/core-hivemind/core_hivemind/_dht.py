"""hivemind's DHT, with a child process that survives a request it cannot unpickle because its sender has exited.

Requests reach the DHT's child process through one pipe from every process that holds the DHT (the peer's main
process and hivemind's averager processes). A request carrying a pipe end or a shared tensor is unpickled by
fetching the file descriptor from the sending process (``multiprocessing.resource_sharer``). An averager sends
such requests up to its shutdown; when the DHT child reads one after the averager exited (or while it exits), the
fetch fails: ``FileNotFoundError`` / ``ConnectionResetError`` once the sender is gone, which hivemind's loop logs
and skips, or ``EOFError`` when the sender's listener accepted the connection and closed it, which hivemind does
not catch, so the DHT child died and every later DHT call of the peer hung. It happened under load only (the DHT
child lagging behind a fast shutdown): the first optimizer's shutdown in a busy test session, never alone.

:class:`RobustDHT` turns that ``EOFError`` into the ``ConnectionError`` hivemind's loop already skips; the lost
request came from a process that is gone, so nobody waits for its answer. An ``EOFError`` of the pipe itself (every
sender closed it) still ends the loop, as before.
"""

from __future__ import annotations

import importlib
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

hivemind: Any = importlib.import_module("hivemind")  # untyped; imported by the strategy once it is known to load


class _Requests:
    """The DHT child's end of its request pipe: unpickling a request whose handles are gone is a ConnectionError."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def recv(self) -> Any:
        data = self._connection.recv_bytes()  # EOFError here: the pipe is closed, the loop ends as hivemind wants
        try:
            return ForkingPickler.loads(data)
        except EOFError as error:
            raise ConnectionError(
                f"a DHT request could not be unpickled: a handle it carries could not be fetched from the process "
                f"that sent it, which has exited ({error!r}); the request is dropped"
            ) from error

    def __getattr__(self, name: str) -> Any:  # fileno, poll, close, ...
        return getattr(self._connection, name)


class RobustDHT(hivemind.DHT):  # type: ignore[misc,unused-ignore]
    """``hivemind.DHT`` whose child process skips requests from processes that exited (see the module's text)."""

    def run(self) -> None:
        pipe: Connection = self.__dict__["_inner_pipe"]  # set by hivemind.DHT.__init__
        self._inner_pipe = _Requests(pipe)
        super().run()
