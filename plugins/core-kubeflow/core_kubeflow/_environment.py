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

from typing import Final

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import LauncherVariables

REQUIRED: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
OPERATOR: Final = LauncherVariables(
    launcher="Kubeflow",
    malformed="the PyTorchJob operator sets it to one.",
    unset=f"{{name}} is not set, but the 'kubeflow' environment reads it from the PyTorchJob pod (it needs "
    f"{', '.join(REQUIRED)}). Run inside a Kubeflow PyTorchJob, or pick another environment.",
)


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
        return OPERATOR.cluster_info(
            world_size="WORLD_SIZE",
            global_rank="RANK",
            local_rank=OPERATOR.read("LOCAL_RANK", 0),
            node_rank="RANK",  # each pod is a node
            main_address=OPERATOR.read_text("MASTER_ADDR"),
            main_port="MASTER_PORT",
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        pods = OPERATOR.read("WORLD_SIZE")
        if devices_per_node != 1 or num_nodes != pods:
            raise ConfigurationError(
                f"devices={devices_per_node} x num_nodes={num_nodes} was requested, but this PyTorchJob has "
                f"WORLD_SIZE={pods} pods with one process each. Use devices=1, num_nodes={pods}; for several "
                f"processes per pod, start torchrun in each pod (the 'torchelastic' environment)."
            )
