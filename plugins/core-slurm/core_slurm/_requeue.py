"""Auto-requeue: on SLURM's warning signal, save a checkpoint, then put the job back in the queue.

SLURM sends a signal ahead of a job's time limit when the job asks for it (``#SBATCH --signal=USR1@90``),
and ``scancel --signal=USR1 <job>`` sends it by hand. Every task of the step receives it. The handler
calls the registered save callback in every process, then global rank 0 runs
``scontrol requeue <job>`` (``<array job>_<array task>`` for array jobs): SLURM ends the job and queues
it again under the same id, and the restarted job resumes from the checkpoint.

Two modes:

- **immediate** (the default, as Lightning does): the callback runs inside the Python signal handler, in
  the main thread, between two bytecodes of whatever the process was doing. Every rank is interrupted,
  so a callback running collectives usually meets the other ranks in the same callback, but a rank that
  is blocked inside a collective of the training step when the signal lands pairs it with the wrong one.
- **deferred**: the handler only records the signal (:attr:`RequeueHandler.received`). The training loop
  checks it at a step boundary, agrees across ranks (an all-reduce of the flag), and calls
  :meth:`RequeueHandler.run` on every rank: the save's collectives then line up by construction.

If the callback raises, the job is not requeued and the error propagates: a save that fails would fail
again after every restart.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import warnings
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Final

from core import ConfigurationError, CoreWarning

log: Final = logging.getLogger("core_slurm")

RequeueCallback = Callable[[], None]
"""What runs on the requeue signal before rank 0 requeues: typically "save a checkpoint"."""

_JOB_ID: Final = re.compile(r"\d+(?:_\d+)?")


def requeue_target(environ: Mapping[str, str] | None = None) -> str | None:
    """The id that ``scontrol requeue`` needs: ``<array job>_<array task>`` for an array task, else the job id."""
    environ = os.environ if environ is None else environ
    array_job, array_task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and array_task:
        return f"{array_job}_{array_task}"
    return environ.get("SLURM_JOB_ID") or None


def requeue_job(job_id: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``scontrol requeue job_id`` and return the finished process (check ``returncode``)."""
    if not _JOB_ID.fullmatch(job_id):
        raise ConfigurationError(
            f"Cannot requeue SLURM job {job_id!r}: expected a job id like '1234' or an array task like '1234_7' "
            f"(from SLURM_JOB_ID, or SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID)."
        )
    return subprocess.run(
        ["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=timeout, check=False
    )


class RequeueHandler:
    """The signal handler behind auto-requeue; installed by :class:`SLURMEnvironment` when a run starts.

    :param global_rank: This process's rank; only rank 0 requeues.
    :param signum: The signal to handle (``SIGUSR1``, as in ``#SBATCH --signal=USR1@90``).
    :param deferred: Only record the signal in :attr:`received`; the loop calls :meth:`run` itself.
    """

    def __init__(self, global_rank: int, signum: int = signal.SIGUSR1, deferred: bool = False) -> None:
        self.global_rank = global_rank
        self.signum = signum
        self.deferred = deferred
        self.callback: RequeueCallback | None = None
        self.received = False
        self._previous: Any = None
        self._installed = False
        self._handling = False

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> bool:
        """Take over the signal; ``False`` (with a warning) outside the main thread, where Python cannot."""
        if self._installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(
                f"SLURM auto-requeue is off: the run started outside the main thread, and Python installs signal "
                f"handlers only from the main thread. Handle {signal.Signals(self.signum).name} yourself, or pass "
                f"SLURMEnvironment(auto_requeue=False) to silence this.",
                CoreWarning,
                stacklevel=3,
            )
            return False
        previous = signal.getsignal(self.signum)
        owner = getattr(previous, "__self__", None)
        if isinstance(owner, RequeueHandler):
            # An earlier run in this process was not torn down: replace its handler rather than requeue twice.
            previous, owner._installed = owner._previous, False
        signal.signal(self.signum, self._on_signal)
        self._previous = previous
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Give the signal back to whatever handled it before :meth:`install`."""
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous if self._previous is not None else signal.SIG_DFL)
        self._installed = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._handling:  # SLURM may repeat the signal while the checkpoint is being written
            return
        self._handling = True
        try:
            self.received = True
            if not self.deferred:
                self.run()
        finally:
            self._handling = False
        if callable(self._previous):
            self._previous(signum, frame)

    def run(self) -> None:
        """Save (every rank), then requeue (rank 0): what the signal triggers, or what a deferred loop calls."""
        log.info("rank %d: received %s, saving before requeue", self.global_rank, signal.Signals(self.signum).name)
        if self.callback is not None:
            self.callback()
        else:
            log.warning("rank %d: no requeue callback registered; requeuing without saving", self.global_rank)
        if self.global_rank != 0:
            return
        job_id = requeue_target()
        if job_id is None:
            warnings.warn("Cannot requeue: SLURM_JOB_ID is not set in this process.", CoreWarning, stacklevel=2)
            return
        result = requeue_job(job_id)
        if result.returncode != 0:
            warnings.warn(
                f"`scontrol requeue {job_id}` failed with exit code {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}",
                CoreWarning,
                stacklevel=2,
            )
            return
        log.info("requeued SLURM job %s", job_id)
