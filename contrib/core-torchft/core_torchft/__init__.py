"""core-torchft: per-step fault tolerance across replica groups with torchft, as the strategy ``torchft_ddp``.

Written only against core's public API, as an outside author would publish it::

    python -m core_torchft.lighthouse --min-replicas 1          # prints TORCHFT_LIGHTHOUSE=http://host:port
    REPLICA_GROUP_ID=0 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=... python train.py    # Lite(strategy="torchft_ddp")
    REPLICA_GROUP_ID=1 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=... python train.py

Importing this package imports torch but not torchft (that happens when a run starts).
"""

from ._engine import INSTALL, unavailable_reason
from ._strategy import (
    HOST_VARIABLE,
    LIGHTHOUSE_VARIABLE,
    MANAGER_STATE_KEY,
    NUM_REPLICA_GROUPS_VARIABLE,
    REPLICA_GROUP_VARIABLE,
    TorchFTStrategy,
)

__all__ = [
    "HOST_VARIABLE",
    "INSTALL",
    "LIGHTHOUSE_VARIABLE",
    "MANAGER_STATE_KEY",
    "NUM_REPLICA_GROUPS_VARIABLE",
    "REPLICA_GROUP_VARIABLE",
    "TorchFTStrategy",
    "unavailable_reason",
]
