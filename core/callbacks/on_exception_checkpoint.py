"""``OnExceptionCheckpoint``: save a checkpoint when an exception escapes a run (Lightning's name and file)."""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Final

import torch
import torch.distributed as dist

from core._errors import ConfigurationError, CoreWarning
from core.callbacks.checkpoint import Checkpoint

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["OnExceptionCheckpoint"]

_AGREEMENT_TAG: Final = 0x0C0E  # the point-to-point tag of the messages by which the processes agree to save


class OnExceptionCheckpoint(Checkpoint):
    """Write ``<dirpath>/<filename>.ckpt`` with ``trainer.save_checkpoint`` when an exception (``KeyboardInterrupt``
    included) escapes ``fit``, ``validate``, ``test`` or ``predict``; resume with ``fit(ckpt_path=...ckpt_path)``.

    The checkpoint is the run as it was when the exception was raised: the steps taken, the batches done in the
    epoch, the optimizers, every callback's state. As in Lightning, a run that ends without an exception deletes
    the file (so that a stale one is not mistaken for the latest state), and an existing file is overwritten.

    Saving is collective, like every ``save_checkpoint``. With several processes the callback first waits up to
    ``timeout`` seconds for every process to reach its own exception handler (an exception all of them raise: a
    ``KeyboardInterrupt``, the same bad batch); an exception raised on some processes only (while the others wait
    in a collective of the step) is not saved, with a :class:`core.CoreWarning`, rather than hanging the run.
    That agreement is point-to-point messages with a deadline over a gloo process group of its own, made in
    :meth:`setup` whatever the run's backend (NCCL runs included), so it never mixes with the step's collectives.

    :param dirpath: The directory of the checkpoint, fixed here because an exception can come at any moment.
    :param filename: The file name without its extension.
    :param timeout: With several processes, how long to wait for the others to fail too (not in Lightning).
    """

    FILE_EXTENSION: Final = ".ckpt"

    def __init__(
        self, dirpath: str | os.PathLike[str], filename: str = "on_exception", *, timeout: float = 30.0
    ) -> None:
        if not filename:
            raise ConfigurationError(
                "OnExceptionCheckpoint(filename=''): the file name cannot be empty (the default is 'on_exception')."
            )
        if not timeout > 0:
            raise ConfigurationError(f"OnExceptionCheckpoint(timeout={timeout!r}): expected a number of seconds > 0.")
        self.timeout = float(timeout)
        self.dirpath = dirpath
        self.filename = filename
        self._saved_in_this_run = False
        self._group: dist.ProcessGroup | None = None  # the agreement's own gloo group, between setup and teardown

    @property
    def state_key(self) -> str:
        # Two of them (different files) may sit in one Trainer.
        return self._state_key_with(dirpath=os.fspath(self.dirpath), filename=self.filename)

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written."""
        return os.path.join(os.fspath(self.dirpath), self.filename + self.FILE_EXTENSION)

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        # Collective: every process runs setup at the same point of the run, before any step.
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized() and dist.is_gloo_available():
            self._group = dist.new_group(backend="gloo", timeout=timedelta(seconds=max(60.0, 4 * self.timeout)))

    def on_exception(self, trainer: TrainerView, module: Module, exception: BaseException) -> None:
        if trainer.world_size > 1:
            not_saved = self._why_not_every_process_failed(trainer.world_size)
            if not_saved is not None:
                warnings.warn(
                    f"OnExceptionCheckpoint did not save {self.ckpt_path}: {not_saved} Saving is collective, so a "
                    f"save that only some processes attempt would hang the run; the exception goes on unsaved.",
                    CoreWarning,
                    stacklevel=2,
                )
                return
        self._saved_in_this_run = True
        trainer.save_checkpoint(self.ckpt_path)

    def _why_not_every_process_failed(self, world_size: int) -> str | None:
        """``None`` when every process reached this exception handler within ``timeout``; else the reason.

        Process 0 waits up to ``timeout`` for a message from each of the others, then answers all of them; the
        others wait twice as long for the answer, so that they never give up on an agreement process 0 reached.
        Point-to-point messages with their own tag cannot be taken for a collective's, and a bounded wait never
        hangs: the processes that did not fail are blocked in a collective of the step, and are stopped when this
        one exits (the launcher stops the rest of a run whose process failed).
        """
        if not (dist.is_available() and dist.is_initialized()):
            return f"the {world_size} processes share no torch.distributed group to agree whether all of them failed."
        group = self._group
        if group is None and dist.get_backend() != "gloo":
            return (
                "the exception came before the callback's setup made the gloo group the processes agree over"
                if dist.is_gloo_available() else "agreeing whether every process failed needs gloo, which this torch "
                "build lacks."
            )
        start = time.monotonic()
        # Every tensor and Work object stays referenced until its transfer is done: a send whose Work object is
        # dropped early may never arrive (seen as a timed-out agreement between two processes that both failed).
        message, received = torch.ones(1), torch.zeros(1)
        try:
            if dist.get_rank() == 0:
                for peer in range(1, world_size):
                    left = max(self.timeout - (time.monotonic() - start), 0.001)
                    _wait(dist.irecv(received, src=peer, group=group, tag=_AGREEMENT_TAG), left)
                answers = [dist.isend(message, dst=peer, group=group, tag=_AGREEMENT_TAG)
                           for peer in range(1, world_size)]
                for answer in answers:
                    _wait(answer, self.timeout)
            else:
                sent = dist.isend(message, dst=0, group=group, tag=_AGREEMENT_TAG)
                _wait(dist.irecv(received, src=0, group=group, tag=_AGREEMENT_TAG), 2 * self.timeout)
                _wait(sent, self.timeout)
        except RuntimeError as error:
            return (
                f"not every process failed within {self.timeout:g} s of this one (the exception is not global; "
                f"{type(error).__name__}: {str(error).strip()})."
            )
        return None

    def teardown(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            with contextlib.suppress(Exception):  # local; a peer stuck in a collective cannot block it
                dist.destroy_process_group(group)
        # The Trainer calls teardown after an exception too; Lightning does not, so only a clean end deletes.
        if self._saved_in_this_run:
            self._saved_in_this_run = False
            return
        trainer.remove_checkpoint(self.ckpt_path)


def _wait(work: dist.Work | None, seconds: float) -> None:
    """Wait for a point-to-point transfer at most ``seconds`` (gloo raises a RuntimeError on the deadline)."""
    if work is not None:
        work.wait(timedelta(seconds=seconds))
