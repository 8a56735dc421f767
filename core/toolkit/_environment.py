"""What environment plugins share: variables exported for a run and restored after it, a free port."""

from __future__ import annotations

import os
import socket


def find_free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


class ExportedVariables:
    """Environment variables an environment plugin sets for libraries that read them (``init_method="env://"``),
    restored to their previous values (or removed) by :meth:`restore`, which teardown calls.

    A public helper for environment plugins: ``self.exported = ExportedVariables()``, then
    ``self.exported.set("MASTER_ADDR", address)`` (or :meth:`set_rendezvous` for the address and port together) and
    ``self.exported.restore()`` in ``environment_teardown``.
    """

    def __init__(self) -> None:
        self._previous: dict[str, str | None] = {}

    def set(self, name: str, value: str) -> None:
        if name not in self._previous:
            self._previous[name] = os.environ.get(name)
        os.environ[name] = value

    def set_rendezvous(self, address: str, port: int) -> None:
        """Export ``MASTER_ADDR`` and ``MASTER_PORT``, where ``init_method="env://"`` finds rank 0's store."""
        self.set("MASTER_ADDR", address)
        self.set("MASTER_PORT", str(port))

    def restore(self) -> None:
        for name, previous in self._previous.items():
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous
        self._previous.clear()
