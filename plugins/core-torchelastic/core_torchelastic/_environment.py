"""The ``torchelastic`` environment: every process was started by ``torchrun`` (torch.distributed.run).

torchrun sets, in each worker: ``TORCHELASTIC_RUN_ID`` (the marker this environment detects), ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK``, ``GROUP_RANK`` (the node rank), ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` (the store of rank 0, which the process group joins). The rank variables without
``TORCHELASTIC_RUN_ID`` are left to the ``local`` environment, which reads the same names: they are also
what ``python -m core.run`` and the ``ddp`` launcher set for their children.
"""

from __future__ import annotations

import os
from typing import Final

from core import ClusterInfo, hookimpl
from core.toolkit import Launched, LauncherVariables, check_layout

MARKER: Final = "TORCHELASTIC_RUN_ID"
TORCHRUN: Final = LauncherVariables(
    launcher="torchrun",
    malformed="torchrun sets it to one.",
    unset="{name} is not set, but the 'torchelastic' environment reads it from torchrun. Start the script with "
    "`torchrun --nproc-per-node N script.py`, or pick another environment.",
)


def is_torchrun_process() -> bool:
    """Whether torchrun started this process."""
    return bool(os.environ.get(MARKER))


class TorchElasticEnvironment:
    """Ranks and the rendezvous store from torchrun's worker variables."""

    kind: Final = "environment"
    name: Final = "torchelastic"
    priority: Final = 500

    @hookimpl
    def environment_detect(self) -> object | None:
        return self if is_torchrun_process() else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        return TORCHRUN.cluster_info(
            world_size="WORLD_SIZE",
            global_rank="RANK",
            local_rank="LOCAL_RANK",
            node_rank="GROUP_RANK",
            main_address=TORCHRUN.read_text("MASTER_ADDR", "127.0.0.1"),
            main_port="MASTER_PORT",
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        world_size = TORCHRUN.read("WORLD_SIZE")
        local_world_size = TORCHRUN.read_if_set("LOCAL_WORLD_SIZE")
        nodes = max(world_size // max(devices_per_node, 1), 1)
        check_layout(
            devices_per_node,
            num_nodes,
            per_node=Launched(
                local_world_size,
                f"torchrun started {local_world_size} processes on this node (--nproc-per-node={local_world_size})",
                f"Make them agree: devices={local_world_size}, or torchrun --nproc-per-node {devices_per_node}.",
            ),
            world_size=Launched(
                world_size,
                f"torchrun's WORLD_SIZE is {world_size}",
                f"Make them agree, for example num_nodes={nodes} for torchrun --nnodes {nodes}.",
            ),
        )
