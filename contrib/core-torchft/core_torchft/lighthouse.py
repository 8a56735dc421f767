"""``python -m core_torchft.lighthouse``: a torchft lighthouse that prints the address replica groups need.

    python -m core_torchft.lighthouse --bind 127.0.0.1:0 --min-replicas 1
    TORCHFT_LIGHTHOUSE=http://127.0.0.1:41481        <- the first line on stdout; export it for every group

Unlike ``torchft_lighthouse`` it accepts port 0 (the OS picks a free port, no race with other programs) and
advertises the address it was bound to rather than the host name. It serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Sequence

from ._engine import submodule
from ._strategy import LIGHTHOUSE_VARIABLE


def advertised(bind: str, served: str) -> str:
    """``http://host:port`` for the address ``bind`` and the port the server reports in ``served``."""
    host, _, _ = bind.rpartition(":")
    host = host.strip("[]")
    port = served.rstrip("/").rsplit(":", 1)[1]
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core_torchft.lighthouse", description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="[::]:29510", help="host:port to listen on (port 0: any free port)")
    parser.add_argument("--min-replicas", type=int, required=True, help="fewest replica groups in a quorum")
    parser.add_argument("--join-timeout-ms", type=int, default=60_000,
                        help="how long to wait for heartbeating groups to join before issuing a quorum")
    parser.add_argument("--quorum-tick-ms", type=int, default=100, help="how often to check for a quorum")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=5_000,
                        help="how long without a heartbeat before a group counts as dead")
    options = parser.parse_args(argv)
    if options.min_replicas < 1:
        parser.error(f"--min-replicas {options.min_replicas}: a quorum needs at least 1 replica group")
    server = submodule("coordination").LighthouseServer(
        bind=options.bind,
        min_replicas=options.min_replicas,
        join_timeout_ms=options.join_timeout_ms,
        quorum_tick_ms=options.quorum_tick_ms,
        heartbeat_timeout_ms=options.heartbeat_timeout_ms,
    )
    print(f"{LIGHTHOUSE_VARIABLE}={advertised(options.bind, server.address())}", flush=True)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
