"""Resumable checkpoints every N steps for a ``Lite`` loop (:class:`ResumableCheckpoints`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import attrs
import torch

from core._checks import is_whole
from core._errors import CheckpointError, ConfigurationError
from core.fault_tolerance._preemption import Preempted, PreemptionWatch, on_preemption
from core.fault_tolerance._resumer import FORMAT, CheckpointDirectory, Resumer
from core.trainer._checkpoint import capture_rng, gather_rng, restore_rng, rng_of_rank
from core.trainer._samples import EpochSamples, SamplePosition, epoch_samples, resized_remainder, sampler_swapped

if TYPE_CHECKING:
    from core.lite import Lite

__all__ = ["ResumableCheckpoints"]

T = TypeVar("T")

PROGRESS_KEY: Final = "core/resume"
RNG_KEY: Final = "core/rng"
EPOCH_RNG_KEY: Final = "core/rng_epoch_start"
_END: Final = object()


@attrs.frozen
class _Resume:
    """What :meth:`ResumableCheckpoints.restore` read, for :meth:`ResumableCheckpoints.batches` of that epoch."""

    batches_done: int
    at_save: dict[str, torch.Tensor] | None
    at_epoch_start: dict[str, torch.Tensor] | None
    position: SamplePosition | None
    world_size: int


def _positive_steps(every_n_steps: object) -> int:
    if not is_whole(every_n_steps, 1):
        raise ConfigurationError(f"every_n_steps={every_n_steps!r}: expected a whole number of steps >= 1.")
    return every_n_steps


def _set_epoch(loader: Any, epoch: int) -> None:
    """Make the next iteration of ``loader`` draw epoch ``epoch`` (distributed samplers shuffle by epoch)."""
    set_epoch = getattr(loader, "set_epoch", None)  # a Lite-set-up loader counts its own epochs
    if callable(set_epoch):
        set_epoch(epoch)
        return
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        sampler_set_epoch = getattr(sampler, "set_epoch", None)
        if callable(sampler_set_epoch):
            sampler_set_epoch(epoch)


class ResumableCheckpoints:
    """Resumable checkpoints of a ``Lite`` loop, every ``every_n_steps`` steps, under one directory.

    :param lite: The running ``Lite`` (create this inside ``launch``).
    :param directory: Where the checkpoints go: a local or shared path (every rank must see the same one),
        or an fsspec URL with the ``torch`` / ``async`` checkpoint_io.
    :param every_n_steps: :meth:`maybe_save` saves when the step is a multiple of this.
    :param keep: How many complete checkpoints to keep; older ones are removed once a newer one is complete.
    :param storage_options: fsspec options for a URL ``directory``.
    :param preemption_signals: Signals that announce a preemption (``SIGTERM`` by default; ``()`` for none).
        Whichever rank receives one, at the next :meth:`maybe_save` every rank agrees on that step, saves
        one checkpoint and raises :class:`Preempted` (exit status 75); run the same command to resume. With
        several processes, the agreement is one small ``all_gather`` per :meth:`maybe_save`.

    A checkpoint holds your ``state`` (modules, optimizers, schedulers: anything with ``state_dict``; plain
    values too), the precision's state (a gradient scaler), every rank's random generators, and the loop's
    position (step, epoch, batches done in the epoch, and the samples of the epoch's order consumed by every
    rank, so that a resume on another number of processes trains each remaining sample once). Every method
    must be called on every rank.
    """

    def __init__(
        self,
        lite: Lite,
        directory: str | os.PathLike[str],
        every_n_steps: int,
        keep: int = 2,
        storage_options: dict[str, Any] | None = None,
        preemption_signals: Sequence[int] = (signal.SIGTERM,),
    ) -> None:
        self.lite = lite
        self.every_n_steps = _positive_steps(every_n_steps)
        self.directory = CheckpointDirectory(os.fspath(directory), storage_options)
        self._resumer = Resumer(
            lite.active, self.directory, keep,
            save=lambda path, state: lite.save(path, state),
            barrier=lite.barrier,
            broadcast=lite.broadcast,
        )
        self.step = 0
        """The step of the last checkpoint saved or restored."""
        self.epoch = 0
        """The epoch the restored checkpoint was taken in (where the loop goes on); 0 on a fresh start."""
        self._batch_in_epoch = 0
        self._epoch_samples: EpochSamples | None = None
        self._epoch_start_rng: dict[str, torch.Tensor] | None = None
        self._resume: _Resume | None = None  # set by restore(), used once by batches() of that epoch
        self._watch = PreemptionWatch(preemption_signals) if preemption_signals else None
        if self._watch is not None:
            self._watch.install()

    # -- resuming ----------------------------------------------------------------------------------

    @property
    def latest(self) -> str | None:
        """The path of the newest complete checkpoint, or ``None`` (asked of storage; no side effects)."""
        step = self.directory.newest_complete()
        return None if step is None else self.directory.checkpoint_path(step)

    def restore(self, state: dict[str, Any]) -> int:
        """Load the newest complete checkpoint into ``state``, if there is one; return the step to go on from.

        Modules, optimizers and schedulers are restored in place, plain values of ``state`` replaced by the
        saved ones. Incomplete checkpoints (a save a crash interrupted) are removed. This rank's random
        generators are set as they were at the save; :meth:`batches` then replays the saved epoch's data
        order. ``0`` means nothing was found: a fresh start.
        """
        found = self._resumer.find()
        if found is None:
            return 0
        path = self.directory.checkpoint_path(found)
        targets: dict[str, Any] = {**state, PROGRESS_KEY: None, RNG_KEY: None, EPOCH_RNG_KEY: None}
        self.lite.load(path, targets)
        progress = targets[PROGRESS_KEY]
        if not isinstance(progress, dict) or progress.get("format") != FORMAT:
            raise CheckpointError(f"{path!r} is not a resumable checkpoint of format {FORMAT!r}.")
        for key, value in targets.items():
            if key in state and value is not state[key]:
                state[key] = value  # plain values come back as saved; objects were restored in place
        rank = self.lite.global_rank
        at_save, at_epoch_start = rng_of_rank(targets[RNG_KEY], rank), rng_of_rank(targets[EPOCH_RNG_KEY], rank)
        if at_save is not None:
            restore_rng(at_save)
        self.step, self.epoch = int(progress["step"]), int(progress["epoch"])
        saved_world_size = int(progress.get("world_size", self.lite.world_size))
        self._resume = _Resume(int(progress["batch_in_epoch"]), at_save, at_epoch_start,
                               SamplePosition.from_dict(progress.get("samples")), saved_world_size)
        return self.step

    def batches(self, loader: Iterable[T], epoch: int) -> Iterator[T]:
        """Iterate epoch ``epoch`` of ``loader``; after a resume into this epoch, skip what was trained on.

        Sets the sampler's epoch, and records the random generators as they are when the epoch's data order
        is drawn, so that a resumed run draws the same order and then continues with the generators as they
        were at the save: the resumed run is the uninterrupted one, bitwise. Resumed on another number of
        processes, the epoch goes on with the samples of its order that no rank had read, dealt to the ranks
        there are now (see docs/fault-tolerance.md, "Resuming on another world size").
        """
        resume = self._resume if self._resume is not None and epoch == self.epoch else None
        self._resume = None
        self.epoch = epoch
        _set_epoch(loader, epoch)
        if resume is not None and resume.at_epoch_start is not None:
            restore_rng(resume.at_epoch_start)
        self._epoch_start_rng = capture_rng()
        remainder = None
        if resume is not None and resume.batches_done > 0:
            remainder = resized_remainder(loader, resume.position, resume.world_size, self.lite.world_size,
                                          resume.batches_done)
        with sampler_swapped(loader, remainder):
            self._epoch_samples = epoch_samples(loader, epoch)
            iterator = iter(loader)
            self._batch_in_epoch = 0
            skip = resume.batches_done if resume is not None and remainder is None else 0
            for _ in range(skip):
                if next(iterator, _END) is _END:
                    break
                self._batch_in_epoch += 1
            if resume is not None and resume.at_save is not None:
                restore_rng(resume.at_save)
            for batch in iterator:
                self._batch_in_epoch += 1  # counted before the body runs: a save in the body includes this batch
                yield batch

    # -- saving ------------------------------------------------------------------------------------

    def maybe_save(self, state: dict[str, Any], step: int) -> bool:
        """Save when ``step`` is a multiple of ``every_n_steps``; return whether it saved.

        Call it on every rank after each optimizer step. It also writes the marker of a checkpoint whose
        background write (``async``) has finished since. After a preemption notice on any rank, every rank
        saves this step and raises :class:`Preempted`.
        """
        stop = on_preemption(self._watch, self.lite, step, lambda: self._save_before_stop(state, step))
        if stop is not None:
            self._stop(stop)
        if step % self.every_n_steps != 0 or step == self.step:
            self._resumer.commit(wait=False)
            return False
        self.save(state, step)
        return True

    def save(self, state: dict[str, Any], step: int) -> None:
        """Save a resumable checkpoint of ``state`` for ``step`` now."""
        reserved = sorted({PROGRESS_KEY, RNG_KEY, EPOCH_RNG_KEY} & set(state))
        if reserved:
            raise ConfigurationError(f"The state keys {reserved} are reserved for resumable checkpoints.")
        lite = self.lite
        samples = self._epoch_samples
        position = None if samples is None else samples.position(self._batch_in_epoch).as_dict()
        progress = {"format": FORMAT, "step": int(step), "epoch": self.epoch, "batch_in_epoch": self._batch_in_epoch,
                    "world_size": lite.world_size, "samples": position}
        full_state = {
            **state,
            PROGRESS_KEY: progress,
            RNG_KEY: gather_rng(lite, capture_rng()),
            EPOCH_RNG_KEY: gather_rng(lite, self._epoch_start_rng or capture_rng()),
        }
        self._resumer.save(int(step), full_state)
        self.step = int(step)

    def finish(self) -> None:
        """Write the marker of the last checkpoint if its background write was still going (call at the end)."""
        self._resumer.commit(wait=True)
        self.lite.barrier("resumable checkpoints: finished")
        if self._watch is not None:
            self._watch.uninstall()

    def _save_before_stop(self, state: dict[str, Any], step: int) -> str:
        if step != self.step:
            self.save(state, step)
        return self.directory.checkpoint_path(step)

    def _stop(self, stop: Preempted) -> NoReturn:
        self.finish()  # the marker written, every rank past it
        if self.lite.is_global_zero:
            print(stop.message, file=sys.stderr, flush=True)
        raise stop

