"""core-diloco: DiLoCo and Streaming DiLoCo, groups of processes that train apart and meet every H steps.

An extension (``plugins=["diloco"]``, or ``plugins=[DiLoCoExtension(replicas=2, sync_every=100)]`` for options)
for the DDP-family strategies: the processes form a mesh ``replicate x inner``; each group trains as plain data
parallelism over its own ranks, and every ``sync_every`` inner steps the groups average their pseudo-gradients
(the parameters' change since the last synchronisation) and apply an outer optimizer (Nesterov SGD by default).
With ``fragments > 1`` one fragment of the model is synchronised at a time, overlapped with the next step.
"""

from ._extension import CHECKPOINT_KEY, DiLoCoExtension
from ._options import COMPRESSIONS, OUTER_OPTIMIZERS, DiLoCoOptions
from ._sync import STATE_KEY, OuterSync, Traffic, split_fragments

__all__ = [
    "CHECKPOINT_KEY",
    "COMPRESSIONS",
    "OUTER_OPTIMIZERS",
    "STATE_KEY",
    "DiLoCoExtension",
    "DiLoCoOptions",
    "OuterSync",
    "Traffic",
    "split_fragments",
]
