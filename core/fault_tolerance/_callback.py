"""``FaultTolerance``: the Trainer's resumable checkpoints, and its automatic resume in ``fit``."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core._checks import is_whole
from core._errors import ConfigurationError
from core.callbacks._callback import Callback
from core.fault_tolerance._preemption import PreemptionWatch, on_preemption
from core.fault_tolerance._resumer import CheckpointDirectory, Resumer
from core.trainer._checkpoint import saved_checkpoint_state

if TYPE_CHECKING:
    from core.module import Module
    from core.trainer import Trainer


class FaultTolerance(Callback):
    """Save a resumable checkpoint every ``every_n_train_steps`` optimizer steps; ``fit`` resumes from the newest.

    :param dirpath: The checkpoint directory (see docs/fault-tolerance.md for its layout); by default
        ``<default_root_dir>/resumable``.
    :param every_n_train_steps: Save at the end of the training batch whose optimizer step is a multiple.
    :param keep: How many complete checkpoints to keep.
    :param storage_options: fsspec options for a URL ``dirpath``.
    :param preemption_signals: Signals that announce a preemption (``SIGTERM`` by default; ``()`` for none).
        Whichever rank receives one, at the end of the next training batch every rank saves that step and
        ``fit`` raises :class:`~core.fault_tolerance.Preempted` (exit status 75); running it again resumes.

    With this callback, ``fit()`` without ``ckpt_path`` starts from the newest complete checkpoint in
    ``dirpath`` when there is one (the whole run state: weights, optimizers, schedulers, precision, loop
    position, metrics, callbacks, every rank's random generators), after removing incomplete ones.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        every_n_train_steps: int = 100,
        keep: int = 2,
        storage_options: dict[str, Any] | None = None,
        preemption_signals: Sequence[int] = (signal.SIGTERM,),
    ) -> None:
        if not is_whole(every_n_train_steps, 1):
            raise ConfigurationError(
                f"FaultTolerance(every_n_train_steps={every_n_train_steps!r}): expected a whole number >= 1."
            )
        self._given_dirpath = None if dirpath is None else os.fspath(dirpath)
        self.every_n_train_steps = every_n_train_steps
        self.keep = keep
        self.storage_options = storage_options
        self._resumer: Resumer | None = None
        self._last_saved_step = -1
        self.preemption_signals = tuple(preemption_signals)
        self._watch: PreemptionWatch | None = None

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        if self.preemption_signals and self._watch is None:
            self._watch = PreemptionWatch(self.preemption_signals)
            self._watch.install()

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        if self._watch is not None:
            self._watch.uninstall()
            self._watch = None

    def _attach(self, trainer: Trainer) -> Resumer:
        if self._resumer is None or self._resumer.active is not trainer.lite.active:
            root = self._given_dirpath or os.path.join(trainer.default_root_dir, "resumable")
            lite = trainer.lite
            self._resumer = Resumer(
                lite.active, CheckpointDirectory(root, self.storage_options), self.keep,
                save=lambda path, state: lite.save(path, state), barrier=lite.barrier, broadcast=lite.broadcast,
            )
        return self._resumer

    @property
    def directory(self) -> CheckpointDirectory | None:
        """Where the checkpoints are, once attached to a run."""
        return None if self._resumer is None else self._resumer.directory

    def resume_checkpoint_path(self, trainer: Trainer) -> str | None:
        """The newest complete checkpoint, agreed by every rank, after removing incomplete ones. Collective."""
        resumer = self._attach(trainer)
        step = resumer.find()
        if step is None:
            return None
        self._last_saved_step = step
        return resumer.directory.checkpoint_path(step)

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        resumer = self._attach(trainer)
        step = trainer.global_step
        if not trainer.sanity_checking:
            stop = on_preemption(self._watch, trainer.lite, step, lambda: self._save_before_stop(trainer, step))
            if stop is not None:
                resumer.commit(wait=True)
                trainer.lite.barrier("fault tolerance: preempted")
                if trainer.is_global_zero:
                    print(stop.message, file=sys.stderr, flush=True)
                raise stop
        if step == 0 or step % self.every_n_train_steps or step == self._last_saved_step or trainer.sanity_checking:
            resumer.commit(wait=False)
            return
        resumer.save(step, saved_checkpoint_state(trainer))
        self._last_saved_step = step

    def _save_before_stop(self, trainer: Trainer, step: int) -> str:
        resumer = self._attach(trainer)
        if step != self._last_saved_step:
            resumer.save(step, saved_checkpoint_state(trainer))
            self._last_saved_step = step
        return resumer.directory.checkpoint_path(step)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        if self._resumer is not None:
            self._resumer.commit(wait=True)
