"""The ``ray_worker`` environment: the ranks of a job that the ``ray`` launcher started as Ray actors.

The launcher (:mod:`core_ray._launcher`) places one actor per rank, asks global rank 0's actor for the
rendezvous address, and sets the variables below in every actor before the run starts there. This environment
reads them back, so the strategy (``ddp``, ``fsdp``, ...) finds its ranks and its rendezvous exactly as under
torchrun. It claims a process only when every variable is present, and before every other environment: an
actor may run on a node that was itself started inside SLURM or torchrun.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

import attrs

from core import ClusterInfo, hookimpl
from core.toolkit import Launched, LauncherVariables, check_layout, cluster_info_from

GLOBAL_RANK: Final = "CORE_RAY_GLOBAL_RANK"
WORLD_SIZE: Final = "CORE_RAY_WORLD_SIZE"
LOCAL_RANK: Final = "CORE_RAY_LOCAL_RANK"
LOCAL_WORLD_SIZE: Final = "CORE_RAY_LOCAL_WORLD_SIZE"
NODE_RANK: Final = "CORE_RAY_NODE_RANK"
RANK_VARIABLES: Final = (GLOBAL_RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, "MASTER_ADDR", "MASTER_PORT")
"""What the launcher sets in every actor before its rank runs; all of them mark a process as a Ray rank."""
RAY_LAUNCHER: Final = LauncherVariables(
    launcher="Ray actor",
    malformed="the 'ray' launcher sets it in every actor it starts. Run the job through plugins=['ray'] rather than "
    "setting CORE_RAY_* variables by hand.",
    unset="{name} is not set; the 'ray' launcher sets it in every actor it starts. Run the job through "
    "plugins=['ray'] rather than setting CORE_RAY_* variables by hand.",
)


@attrs.frozen
class RayRank:
    """Where one actor sits in its job, as the launcher told it."""

    global_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    main_address: str
    main_port: int

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    def variables(self) -> dict[str, str]:
        """The launcher's variables for this rank, plus torchrun's names for libraries that read those."""
        return {
            GLOBAL_RANK: str(self.global_rank),
            WORLD_SIZE: str(self.world_size),
            LOCAL_RANK: str(self.local_rank),
            LOCAL_WORLD_SIZE: str(self.local_world_size),
            NODE_RANK: str(self.node_rank),
            "MASTER_ADDR": self.main_address,
            "MASTER_PORT": str(self.main_port),
            "RANK": str(self.global_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
        }


def read_rank(environ: Mapping[str, str] | None = None) -> RayRank:
    """The rank the launcher gave this actor; :class:`core.ConfigurationError` when a variable is malformed."""
    environ = os.environ if environ is None else environ
    return RayRank(
        global_rank=RAY_LAUNCHER.read(GLOBAL_RANK, environ=environ),
        world_size=RAY_LAUNCHER.read(WORLD_SIZE, environ=environ),
        local_rank=RAY_LAUNCHER.read(LOCAL_RANK, environ=environ),
        local_world_size=RAY_LAUNCHER.read(LOCAL_WORLD_SIZE, environ=environ),
        node_rank=RAY_LAUNCHER.read(NODE_RANK, environ=environ),
        main_address=environ.get("MASTER_ADDR", ""),
        main_port=RAY_LAUNCHER.read("MASTER_PORT", environ=environ),
    )


def in_ray_rank() -> bool:
    """Whether this process is an actor of a job started by the ``ray`` launcher."""
    return all(name in os.environ for name in RANK_VARIABLES)


class RayWorkerEnvironment:
    """Ranks of a ``plugins=["ray"]`` job, each in its own Ray actor; claimed before every other environment."""

    kind: Final = "environment"
    name: Final = "ray_worker"
    priority: Final = 700  # above torchelastic (500): the launcher's markers are the most specific there are

    @hookimpl
    def environment_detect(self) -> object | None:
        return self if in_ray_rank() else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_processes_per_node(self) -> int:
        return read_rank().local_world_size

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        rank = read_rank()
        return cluster_info_from(rank, rank.main_address, rank.main_port)

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        rank = read_rank()
        fix = (
            f"The actor resolves the same Lite settings as the launching process: pass "
            f"devices={rank.local_world_size}, num_nodes={rank.num_nodes} explicitly rather than 'auto'."
        )
        check_layout(
            devices_per_node,
            num_nodes,
            per_node=Launched(
                rank.local_world_size, f"the 'ray' launcher started {rank.local_world_size} actor(s) per node", fix
            ),
            nodes=Launched(
                rank.num_nodes,
                f"the 'ray' launcher started actors on {rank.num_nodes} node(s) ({rank.world_size} in all)",
                fix,
            ),
        )
