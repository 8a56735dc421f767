"""core-horovod: Horovod as a strategy of core, and ``horovodrun``'s ranks as an environment.

Written only against core's public API, as an outside author would publish it::

    horovodrun -np 2 -H localhost:2 --gloo python train.py    # train.py: Lite(strategy="horovod")
"""

from ._engine import INSTALL, unavailable_reason
from ._environment import HorovodEnvironment, HorovodRanks, derived_port, read_ranks
from ._strategy import HorovodStrategy

__all__ = [
    "INSTALL",
    "HorovodEnvironment",
    "HorovodRanks",
    "HorovodStrategy",
    "derived_port",
    "read_ranks",
    "unavailable_reason",
]
