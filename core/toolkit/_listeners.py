"""Listening sockets a launcher binds before it starts the ranks, and hands to the rank that serves a store.

A launcher that picks a "free" port and lets rank 0 bind it later races every other program on the machine:
the port may be taken in between, and a rank may then reach someone else's store. Instead the launcher binds
the socket itself (port 0: the OS picks), passes the descriptor to the rank that serves the rendezvous store,
and names it in :data:`LISTEN_FD_VARIABLE`; that rank hands it to ``torch.distributed.TCPStore`` as
``master_listen_fd``. ``python -m core.run`` does this for single-node jobs; core-ddp reads it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Final

LISTEN_FD_VARIABLE: Final = "CORE_LISTEN_FD"
"""Names the descriptor of a listening socket this process inherited for the rendezvous store."""


def is_loopback(address: str) -> bool:
    """Whether ``address`` (an IP or ``localhost``) is this machine's loopback address."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def bind_listener(address: str, port: int = 0) -> socket.socket:
    """A listening TCP socket on ``address:port``: on the loopback address only when ``address`` is one,
    else on every interface (other nodes must reach it). Raises ``OSError`` when the port is taken."""
    bind_to = ("127.0.0.1" if address == "localhost" else address) if is_loopback(address) else ""
    family = socket.AF_INET6 if ":" in bind_to else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bind_to, port))
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        raise
    return listener


def take_inherited_listener() -> int | None:
    """The listening socket's descriptor a launcher passed to this process, once (the variable is removed)."""
    raw = os.environ.pop(LISTEN_FD_VARIABLE, None)
    if raw is None or not raw.isdigit():
        return None
    descriptor = int(raw)
    try:
        probe = socket.socket(fileno=os.dup(descriptor))
    except OSError:
        return None
    with probe:
        listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    return descriptor if listening else None
