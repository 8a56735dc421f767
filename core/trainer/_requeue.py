"""The Trainer's auto-requeue: Lightning's SLURM behaviour, for any environment that can requeue its job; and
:class:`Preempted`, how every rank stops after a preemption or a requeue (public as ``core.fault_tolerance``'s).

In a job whose environment plugin can put the job back in the queue (``core_slurm.SLURMEnvironment``: the
:class:`Requeueable` protocol), ``fit`` registers a deferred requeue callback. When the scheduler's notice
arrives (``#SBATCH --signal=USR1@90``) in any process, every rank agrees on it at the end of the next
training batch, saves ``<default_root_dir>/hpc_ckpt_<n>.ckpt`` with ``trainer.save_checkpoint`` (n counting up
from 1), global rank 0 requeues the job, and ``fit`` raises :class:`~core.fault_tolerance.Preempted` (exit
status 75). The requeued job runs the same script: ``fit()`` without ``ckpt_path`` resumes from the newest
``hpc_ckpt_<n>.ckpt``, as Lightning's does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from core.callbacks._callback import Callback
from core.toolkit import PREEMPTED_EXIT_CODE
from core.trainer._checkpoint import hpc_resume_path, hpc_save_path

if TYPE_CHECKING:
    from core.lite import Lite
    from core.module import Module
    from core.trainer._view import LoopView as Trainer  # the protocol: the Trainer's class imports this module


class Preempted(SystemExit):
    """Raised on every rank once the run saved at the step all ranks agreed on; exits with status 75.

    Launchers (core-ddp, ``python -m core.run``) treat it as a stop, not a failure. ``torchrun
    --max-restarts`` and a requeued SLURM job start the run again, which resumes from the checkpoint.
    """

    def __init__(self, message: str, step: int, signal_name: str, ranks: Sequence[int], path: str | None) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.message = message
        self.step = step
        self.signal_name = signal_name
        self.ranks = tuple(ranks)
        self.path = path

    def __str__(self) -> str:
        return self.message


def every_ranks(lite: Lite, value: int) -> list[int]:
    """``value`` as each global rank holds it, in rank order (one small ``all_gather``; a collective on several
    processes): how a notice that only some ranks received becomes one answer on every rank."""
    if lite.world_size == 1:
        return [value]
    gathered = lite.all_gather(torch.tensor([value], dtype=torch.int64, device=lite.device))
    return [int(each) for each in gathered.reshape(-1).tolist()]


@runtime_checkable
class Requeueable(Protocol):
    """An environment plugin that can requeue its job: what the Trainer's auto-requeue uses.

    ``core_slurm.SLURMEnvironment`` implements it; another scheduler's environment plugin that implements these
    three members gets the same behaviour under the Trainer.
    """

    @property
    def requeue_requested(self) -> bool:
        """Whether the scheduler's requeue notice arrived in this process."""
        ...

    def set_requeue_callback(self, callback: Callable[[], Any] | None, *, deferred: bool = False) -> bool:
        """Register what every process runs before the job is requeued; return whether auto-requeue is on."""
        ...

    def requeue(self) -> None:
        """Run the callback in this process and, on global rank 0, requeue the job."""
        ...


class AutoRequeue(Callback):
    """Save ``hpc_ckpt_<n>.ckpt`` and requeue the job on the scheduler's notice; resume from it in ``fit``.

    The Trainer adds one to every run whose environment is :class:`Requeueable` (and removes it after), first in
    the callback order, so its checkpoint is the one ``fit()`` without ``ckpt_path`` resumes from; it is not
    meant to be passed by hand. ``SLURMEnvironment(auto_requeue=False)`` turns the requeue off; resuming from an
    existing ``hpc_ckpt_<n>.ckpt`` stays, as in Lightning.

    :param environment: The run's environment plugin.
    """

    def __init__(self, environment: Requeueable) -> None:
        self.environment = environment
        self.enabled = False
        self._path: str | None = None

    def resume_checkpoint_path(self, trainer: Trainer) -> str | None:
        """The newest ``hpc_ckpt_<n>.ckpt`` in ``default_root_dir`` (found on global rank 0). Collective."""
        found = hpc_resume_path(trainer.default_root_dir) if trainer.is_global_zero else None
        chosen: str | None = trainer.lite.broadcast(found)
        return chosen

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit":
            self.enabled = self.environment.set_requeue_callback(lambda: self._save(trainer), deferred=True)

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit":
            self.environment.set_requeue_callback(None)
            self.enabled = False

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.enabled or trainer.sanity_checking:
            return
        # Every rank stops at the same step, whichever ones heard the notice.
        heard = every_ranks(trainer.lite, int(self.environment.requeue_requested))
        ranks = [rank for rank, flag in enumerate(heard) if flag]
        if not ranks:
            return
        self._path = None
        self.environment.requeue()  # every rank: the callback (the save, collective); then rank 0 requeues
        step = trainer.global_step
        message = (
            f"core: the job was requeued at the scheduler's notice (received by global rank(s) "
            f"{ranks}): every rank stopped after step {step}, saved "
            f"{self._path} and global rank 0 requeued the job. The requeued job resumes from it (fit() without "
            f"ckpt_path); this run ends with exit status {PREEMPTED_EXIT_CODE}."
        )
        if trainer.is_global_zero:
            print(message, file=sys.stderr, flush=True)
        raise Preempted(message, step, "requeue", ranks, self._path)

    def _save(self, trainer: Trainer) -> None:
        path: str = trainer.lite.broadcast(hpc_save_path(trainer.default_root_dir) if trainer.is_global_zero else "")
        self._path = path
        trainer.save_checkpoint(path)
