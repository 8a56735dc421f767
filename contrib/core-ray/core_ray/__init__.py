"""core-ray: run any ``Lite`` or ``Trainer`` job on a Ray cluster, one Ray actor per rank.

Written only against core's public API, as an outside author would publish it::

    Lite(strategy="ddp", devices=2, num_nodes=2, plugins=["ray"]).launch(train)

Two plugins: the extension ``ray`` (:class:`RayLauncher`, the launcher: placement, actors, results, the first
failure) and the environment ``ray_worker`` (:class:`RayWorkerEnvironment`, the ranks inside each actor, found
by auto-detection). Importing this package imports neither torch nor Ray.
"""

from ._engine import INSTALL, unavailable_reason
from ._environment import RANK_VARIABLES, RayRank, RayWorkerEnvironment, in_ray_rank, read_rank
from ._launcher import PLACEMENTS, RayLauncher, RayRankFailedError

__all__ = [
    "INSTALL",
    "PLACEMENTS",
    "RANK_VARIABLES",
    "RayLauncher",
    "RayRank",
    "RayRankFailedError",
    "RayWorkerEnvironment",
    "in_ray_rank",
    "read_rank",
    "unavailable_reason",
]
