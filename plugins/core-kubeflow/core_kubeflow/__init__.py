"""The Kubeflow PyTorchJob cluster environment for core; used only when named: ``plugins=["kubeflow"]``."""

from __future__ import annotations

from ._environment import KubeflowEnvironment

__all__ = ["KubeflowEnvironment"]
