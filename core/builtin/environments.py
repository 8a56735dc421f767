"""The ``local`` environment: one machine, or nodes started by hand or by ``python -m core.run``.

Ranks come from ``LOCAL_RANK`` / ``NODE_RANK`` / ``RANK`` / ``WORLD_SIZE`` when a launcher set them, and
default to a single process otherwise. The rendezvous is ``MASTER_ADDR:MASTER_PORT``; with no port set,
a free one is picked once and exported so that processes started from this one agree on it.
"""

from __future__ import annotations

import os
from typing import Final

from core._checks import read_whole
from core._errors import ConfigurationError
from core._markers import hookimpl
from core._records import ClusterInfo
from core.toolkit import ExportedVariables, find_free_port


def _int_variable(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return read_whole(name, raw)


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
        local_rank = _int_variable("LOCAL_RANK", 0)
        node_rank = _int_variable("NODE_RANK", _int_variable("GROUP_RANK", 0))
        world_size = _int_variable("WORLD_SIZE", devices_per_node * num_nodes)
        global_rank = _int_variable("RANK", node_rank * devices_per_node + local_rank)
        return ClusterInfo(
            world_size=world_size,
            global_rank=global_rank,
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
        world_size = os.environ.get("WORLD_SIZE")
        if world_size and world_size.isdigit() and int(world_size) != devices_per_node * num_nodes:
            raise ConfigurationError(
                f"WORLD_SIZE={world_size} is set in the environment, but devices x num_nodes = "
                f"{devices_per_node} x {num_nodes} = {devices_per_node * num_nodes}; make them agree."
            )

    @hookimpl
    def environment_teardown(self) -> None:
        self._exported.restore()
