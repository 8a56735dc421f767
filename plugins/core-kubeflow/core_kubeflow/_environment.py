"""The ``kubeflow`` environment: one process per pod of a Kubeflow ``PyTorchJob``.

The training operator sets in every pod ``MASTER_ADDR`` and ``MASTER_PORT`` (the master pod's service),
``WORLD_SIZE`` (the number of pods, master and workers) and ``RANK`` (this pod's index, 0 for the master).
Each pod is a node running one process, so the node rank is ``RANK`` and the local rank is ``LOCAL_RANK``
when something set it, else 0. Several processes per pod are what ``torchrun`` inside the pod is for
(the ``torchelastic`` environment).

Never auto-detected: these are the variables of any torchrun-style launch, so claiming them would take
every such job away from the right environment. Select it with ``plugins=["kubeflow"]``.
"""

from __future__ import annotations

import os
from typing import Final

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import read_whole

REQUIRED: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def _require(name: str) -> str:
    raw = os.environ.get(name, "").strip()
    if not raw:
        raise ConfigurationError(
            f"{name} is not set, but the 'kubeflow' environment reads it from the PyTorchJob pod "
            f"(it needs {', '.join(REQUIRED)}). Run inside a Kubeflow PyTorchJob, or pick another environment."
        )
    return raw


def _read_int(name: str, default: int | None = None) -> int:
    if default is not None and not os.environ.get(name, "").strip():
        return default
    return read_whole(name, _require(name), source="Kubeflow", hint="the PyTorchJob operator sets it to one.")


class KubeflowEnvironment:
    """Ranks from a PyTorchJob pod's variables: one process per pod."""

    kind: Final = "environment"
    name: Final = "kubeflow"
    priority: Final = 0

    @hookimpl
    def environment_detect(self) -> object | None:
        return None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        rank = _read_int("RANK")
        return ClusterInfo(
            world_size=_read_int("WORLD_SIZE"),
            global_rank=rank,
            local_rank=_read_int("LOCAL_RANK", default=0),
            node_rank=rank,
            main_address=_require("MASTER_ADDR"),
            main_port=_read_int("MASTER_PORT"),
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        pods = _read_int("WORLD_SIZE")
        if devices_per_node != 1 or num_nodes != pods:
            raise ConfigurationError(
                f"devices={devices_per_node} x num_nodes={num_nodes} was requested, but this PyTorchJob has "
                f"WORLD_SIZE={pods} pods with one process each. Use devices=1, num_nodes={pods}; for several "
                f"processes per pod, start torchrun in each pod (the 'torchelastic' environment)."
            )
