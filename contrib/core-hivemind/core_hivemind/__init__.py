"""core-hivemind: collaborative training through hivemind's DHT as the strategy ``hivemind`` of core.

Written only against core's public API, as an outside author would publish it::

    python train.py                                   # the first peer prints PL_INITIAL_PEERS=/ip4/...
    PL_INITIAL_PEERS=/ip4/127.0.0.1/tcp/.../p2p/... python train.py    # every other peer
"""

from ._engine import INSTALL, unavailable_reason
from ._strategy import INITIAL_PEERS_ENV, LOOPBACK_MADDRS, HivemindStrategy, peers_from_environment

__all__ = [
    "INITIAL_PEERS_ENV",
    "INSTALL",
    "LOOPBACK_MADDRS",
    "HivemindStrategy",
    "peers_from_environment",
    "unavailable_reason",
]
