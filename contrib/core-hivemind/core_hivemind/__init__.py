"""core-hivemind: collaborative training through hivemind's DHT as the strategy ``hivemind`` of core.

Written only against core's public API, as an outside author would publish it::

    python train.py                                   # the first peer prints PL_INITIAL_PEERS=/ip4/...
    PL_INITIAL_PEERS=/ip4/127.0.0.1/tcp/.../p2p/... python train.py    # every other peer
"""

from typing import Any

from ._engine import INSTALL, unavailable_reason
from ._strategy import INITIAL_PEERS_ENV, LOOPBACK_MADDRS, HivemindStrategy, peers_from_environment

__all__ = [
    "INITIAL_PEERS_ENV",
    "INSTALL",
    "LOOPBACK_MADDRS",
    "HivemindStrategy",
    "RobustDHT",
    "peers_from_environment",
    "unavailable_reason",
]


def __getattr__(name: str) -> Any:
    # RobustDHT subclasses hivemind.DHT: importing it imports hivemind, so only when asked for.
    if name == "RobustDHT":
        from ._dht import RobustDHT

        return RobustDHT
    raise AttributeError(f"module 'core_hivemind' has no attribute {name!r}")
