"""The torchelastic cluster environment for core: processes started by ``torchrun``.

Detected first of all environments, since torchrun may itself run inside a SLURM or LSF job.
"""

from __future__ import annotations

from ._environment import TorchElasticEnvironment, is_torchrun_process

__all__ = ["TorchElasticEnvironment", "is_torchrun_process"]
