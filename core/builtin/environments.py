"""The ``local`` environment: one machine, or nodes started by hand or by ``python -m core.run``.

Ranks come from ``LOCAL_RANK`` / ``NODE_RANK`` / ``RANK`` / ``WORLD_SIZE`` when a launcher set them, and
default to a single process otherwise. The rendezvous is ``MASTER_ADDR:MASTER_PORT``; with no port set,
a free one is picked once and exported so that processes started from this one agree on it.
"""

from __future__ import annotations

import os
from typing import Final

from core._markers import hookimpl
from core._records import ClusterInfo
from core.toolkit import ExportedVariables, Launched, LauncherVariables, check_layout, find_free_port

# Set by a launcher (``python -m core.run``, the ddp launcher, a user's script) or by hand; every one has a default.
LAUNCHER: Final = LauncherVariables(launcher="environment")


class LocalEnvironment:
    """The fallback environment: always detected, asked last."""

    kind: Final = "environment"
    name: Final = "local"
    priority: Final = -1000

    def __init__(self) -> None:
        self._exported = ExportedVariables()

    @hookimpl
    def environment_detect(self) -> object:
        return self

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        # A launcher (ours, or a user's script) sets LOCAL_RANK in every process it starts.
        return "LOCAL_RANK" in os.environ

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        local_rank = LAUNCHER.read("LOCAL_RANK", 0)
        node_rank = LAUNCHER.read("NODE_RANK", LAUNCHER.read("GROUP_RANK", 0))
        return LAUNCHER.cluster_info(
            world_size=LAUNCHER.read("WORLD_SIZE", devices_per_node * num_nodes),
            global_rank=LAUNCHER.read("RANK", node_rank * devices_per_node + local_rank),
            local_rank=local_rank,
            node_rank=node_rank,
            main_address=self._export("MASTER_ADDR", "127.0.0.1"),
            main_port=int(self._export("MASTER_PORT", None)),
        )

    def _export(self, name: str, default: str | None) -> str:
        value = os.environ.get(name)
        if not value:
            value = default if default is not None else str(find_free_port())
            self._exported.set(name, value)
        return value

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        world_size = LAUNCHER.read_if_set("WORLD_SIZE")
        check_layout(
            devices_per_node,
            num_nodes,
            world_size=Launched(
                world_size,
                f"WORLD_SIZE={world_size} is set in the environment",
                f"Make them agree: devices x num_nodes = {world_size}, or unset WORLD_SIZE.",
            ),
        )

    @hookimpl
    def environment_teardown(self) -> None:
        self._exported.restore()
