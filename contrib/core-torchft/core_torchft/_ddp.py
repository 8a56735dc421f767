"""``FaultTolerantDDP``: torchft's ``DistributedDataParallel`` with a communication hook that survives a failure.

No ``from __future__ import annotations`` here: DDP inspects a communication hook's annotations when it is
registered and accepts only the real ``dist.GradBucket`` and ``Future`` types, not their names.

torchft 0.2's own ``DistributedDataParallel._comm_hook`` returns the inner future of the managed allreduce
(``assert fut._fut``): when another replica group dies while this one waits in that allreduce (gloo: "Connection
closed by peer"), the assertion fails and the survivor's backward raises ``AssertionError`` instead of discarding
the step (reproduced here: tests/test_torchft_replicas.py kills a group inside its backward pass; with torchft's
wrapper both survivors exit with that error). Here the hook waits for the managed allreduce (which averages
the bucket in place over the quorum's groups, or records the error with the manager so that ``should_commit``
refuses the step) and hands DDP the bucket either way.
"""

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from . import _engine


def average_over_quorum(manager: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average ``bucket`` over the replica groups of this step's quorum, through ``manager.allreduce``."""
    buffer = bucket.buffer()
    manager.allreduce(buffer).wait()  # False after an error, which the manager keeps: the step will not commit
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(buffer)
    return done


class FaultTolerantDDP(DistributedDataParallel):
    """A module whose gradients are averaged over replica groups by a ``torchft.Manager``."""

    def __init__(self, manager: Any, module: torch.nn.Module) -> None:
        dummy = _engine.submodule("process_group").ProcessGroupDummy
        # As torchft's wrapper: a dummy group soaks up DDP's own initial broadcast (the manager syncs the
        # weights at the first quorum), and buckets are never rebuilt, so a group that joins later has the same.
        super().__init__(module, process_group=dummy(0, 1), find_unused_parameters=True)
        self.register_comm_hook(manager, average_over_quorum)
