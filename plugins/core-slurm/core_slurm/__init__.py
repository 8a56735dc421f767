"""The SLURM cluster environment for core, with auto-requeue.

``plugins=["slurm"]`` picks it; a process started by ``srun`` is detected without naming it.
"""

from __future__ import annotations

from ._environment import SLURMEnvironment, is_interactive, is_slurm_task, main_address, main_port
from ._hostlist import expand_hostlist, first_host, iter_hostlist
from ._requeue import RequeueCallback, RequeueHandler, requeue_job, requeue_target

__all__ = [
    "RequeueCallback",
    "RequeueHandler",
    "SLURMEnvironment",
    "expand_hostlist",
    "first_host",
    "is_interactive",
    "is_slurm_task",
    "iter_hostlist",
    "main_address",
    "main_port",
    "requeue_job",
    "requeue_target",
]
