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

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import read_whole

MARKER: Final = "TORCHELASTIC_RUN_ID"


def is_torchrun_process() -> bool:
    """Whether torchrun started this process."""
    return bool(os.environ.get(MARKER))


def _read_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        raise ConfigurationError(
            f"{name} is not set, but the 'torchelastic' environment reads it from torchrun. Start the script "
            f"with `torchrun --nproc-per-node N script.py`, or pick another environment."
        )
    return read_whole(name, raw, source="torchrun", hint="torchrun sets it to one.")


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
        return ClusterInfo(
            world_size=_read_int("WORLD_SIZE"),
            global_rank=_read_int("RANK"),
            local_rank=_read_int("LOCAL_RANK"),
            node_rank=_read_int("GROUP_RANK"),
            main_address=os.environ.get("MASTER_ADDR") or "127.0.0.1",
            main_port=_read_int("MASTER_PORT"),
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        world_size = _read_int("WORLD_SIZE")
        local_world_size = os.environ.get("LOCAL_WORLD_SIZE", "")
        if local_world_size.isdigit() and int(local_world_size) != devices_per_node:
            raise ConfigurationError(
                f"devices={devices_per_node} per node was requested, but torchrun started {local_world_size} "
                f"processes on this node (--nproc-per-node={local_world_size}). Make them agree: "
                f"devices={local_world_size}, or torchrun --nproc-per-node {devices_per_node}."
            )
        if world_size != devices_per_node * num_nodes:
            raise ConfigurationError(
                f"devices x num_nodes = {devices_per_node} x {num_nodes} = {devices_per_node * num_nodes} "
                f"processes were requested, but torchrun's WORLD_SIZE is {world_size}. Make them agree, for "
                f"example num_nodes={max(world_size // max(devices_per_node, 1), 1)} for torchrun "
                f"--nnodes {max(world_size // max(devices_per_node, 1), 1)}."
            )
