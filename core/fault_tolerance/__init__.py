"""Fault-tolerant training: resumable checkpoints every N steps, and automatic resume after a crash.

For your own ``Lite`` loop, :class:`ResumableCheckpoints`::

    checkpoints = ResumableCheckpoints(lite, "checkpoints", every_n_steps=100, keep=2)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    step = checkpoints.restore(state)          # 0 on a fresh start; else the step of the newest complete one
    for epoch in range(checkpoints.epoch, max_epochs):
        for batch in checkpoints.batches(loader, epoch):   # skips what a resumed epoch already trained on
            ...                                            # forward, lite.backward, optimizer.step
            step += 1
            checkpoints.maybe_save(state, step)
    checkpoints.finish()

For the Trainer, the :class:`FaultTolerance` callback does the same around ``fit``. See
docs/fault-tolerance.md for the guarantees and for resuming under torchrun, SLURM or by hand.
"""

from __future__ import annotations

from core.fault_tolerance._callback import FaultTolerance
from core.fault_tolerance._checkpoints import ResumableCheckpoints
from core.fault_tolerance._resumer import CHECKPOINT_NAME, MARKER_NAME, CheckpointDirectory
from core.trainer._requeue import AutoRequeue, Preempted, Requeueable

__all__ = [
    "CHECKPOINT_NAME",
    "MARKER_NAME",
    "AutoRequeue",
    "CheckpointDirectory",
    "FaultTolerance",
    "Preempted",
    "Requeueable",
    "ResumableCheckpoints",
]
