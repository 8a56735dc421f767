"""Resumable checkpoints: a directory of numbered checkpoints, each complete only once its marker exists.

Layout, under the directory given (a local or shared path, or an fsspec URL for the single-file formats)::

    step-000000040/checkpoint.pt    the state, as Lite.save writes it (a file, or a directory of shards)
    step-000000040/COMPLETE         the marker: written last, by global rank 0, after every rank's part
    step-000000050/checkpoint.pt    a save in progress, or one a crash interrupted: no marker, ignored

Both the state and the marker go through the run's checkpoint_io, so the marker lands after the state
even when writes happen in the background (``async`` writes in order; its marker is written once the
state's write has finished). Resuming takes the newest step with a marker; every step without one is
removed first. Rotation removes a checkpoint's marker before its state, so a crash while removing leaves
an incomplete checkpoint (cleaned up later), never a marker without its state.

:class:`CheckpointDirectory` is the layout and its rules; :class:`Resumer` drives it for a run (the
Trainer's fault tolerance and :class:`core.fault_tolerance.ResumableCheckpoints` both use it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from core._checks import is_whole
from core._errors import CheckpointError, ConfigurationError
from core.toolkit import _storage

if TYPE_CHECKING:
    from core.registry._active import ActiveSet

FORMAT: Final = "core.resumable/1"
MARKER_NAME: Final = "COMPLETE"
CHECKPOINT_NAME: Final = "checkpoint.pt"
_STEP: Final = re.compile(r"^step-(\d+)$")


class CheckpointDirectory:
    """Where the checkpoint of each step lives, and which steps are complete.

    :param root: The directory (a path or an fsspec URL).
    :param storage_options: fsspec options for a URL.
    """

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self.root = root
        self.storage_options = storage_options

    def step_path(self, step: int) -> str:
        return _storage.join(self.root, f"step-{step:09d}")

    def checkpoint_path(self, step: int) -> str:
        return _storage.join(self.step_path(step), CHECKPOINT_NAME)

    def marker_path(self, step: int) -> str:
        return _storage.join(self.step_path(step), MARKER_NAME)

    def steps(self) -> dict[int, bool]:
        """Every step that has a directory, mapped to whether it is complete (its marker exists)."""
        found = {}
        for name in _storage.list_names(self.root, self.storage_options):
            match = _STEP.match(name)
            if match is not None:
                step = int(match.group(1))
                found[step] = _storage.exists(self.marker_path(step), self.storage_options)
        return found

    def newest_complete(self) -> int | None:
        complete = [step for step, done in self.steps().items() if done]
        return max(complete) if complete else None


class Resumer:
    """Saves, commits, rotates and finds resumable checkpoints for one run.

    Every method is called on every rank at the same point; the side effects on storage happen on global
    rank 0 (saving the state itself is the strategy's business: which ranks write is its decision).

    :param active: The run's active set.
    :param directory: The checkpoint directory.
    :param keep: How many complete checkpoints to keep (the newest); older ones are removed.
    :param save: Writes a state to a path (``Lite.save``).
    :param barrier: Waits for every rank.
    :param broadcast: Sends an object from rank 0 to every rank.
    """

    def __init__(
        self,
        active: ActiveSet,
        directory: CheckpointDirectory,
        keep: int,
        save: Callable[[str, dict[str, Any]], None],
        barrier: Callable[[str], None],
        broadcast: Callable[[Any], Any],
    ) -> None:
        if not is_whole(keep, 1):
            raise ConfigurationError(f"keep={keep!r}: keep at least 1 complete checkpoint (a whole number >= 1).")
        self.active = active
        self.directory = directory
        self.keep = keep
        self._save = save
        self._barrier = barrier
        self._broadcast = broadcast
        self._uncommitted: int | None = None

    @property
    def is_global_zero(self) -> bool:
        return self.active.cluster.is_global_zero

    # -- finding -----------------------------------------------------------------------------------

    def find(self) -> int | None:
        """The newest complete step, agreed by every rank; incomplete steps are removed first (rank 0)."""
        chosen = None
        if self.is_global_zero:
            steps = self.directory.steps()
            for step, done in sorted(steps.items()):
                if not done:
                    self._remove(step)
            complete = [step for step, done in steps.items() if done]
            chosen = max(complete) if complete else None
        chosen = self._broadcast(chosen)
        self._barrier("resumable checkpoints: cleaned")
        return chosen

    # -- saving ------------------------------------------------------------------------------------

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Write the checkpoint of ``step``; it becomes complete once every rank's part is on storage."""
        self.commit(wait=True)  # the previous checkpoint first: a new save waits for its write anyway
        if self.is_global_zero and self.directory.steps().get(step) is not None:
            self._remove(step)  # left by an earlier attempt at this step
        self._barrier("resumable checkpoints: before save")
        self._save(self.directory.checkpoint_path(step), state)
        self._barrier("resumable checkpoints: every part written")
        if self.is_global_zero:
            self._uncommitted = step
            self.commit(wait=False)

    def commit(self, wait: bool) -> None:
        """Write the marker of the last saved step once its state is on storage (rank 0; others return).

        :param wait: Write it now even if the checkpoint_io still writes in the background (the marker
            then queues behind the state); otherwise only when nothing is in flight.
        """
        step = self._uncommitted
        if step is None or not self.is_global_zero:
            return
        if not wait and int(getattr(self.active.checkpoint_io, "pending", 0)):
            return
        marker = {"format": FORMAT, "step": step, "world_size": self.active.cluster.world_size,
                  "checkpoint_io": self.active.config.checkpoint_io, "strategy": self.active.config.strategy}
        self.active.hook.checkpoint_io_save(checkpoint=marker, path=self.directory.marker_path(step),
                                            storage_options=None)
        self._uncommitted = None
        self._rotate(step)

    def _rotate(self, committed: int) -> None:
        # The marker just written may still be queued (async): it counts as complete, it lands before any removal.
        complete = sorted({step for step, done in self.directory.steps().items() if done} | {committed})
        for step in complete[: max(0, len(complete) - self.keep)]:
            self._remove(step)

    def _remove(self, step: int) -> None:
        # The marker goes first: a crash in between leaves an incomplete checkpoint, never a lying marker.
        remove = self.active.hook.checkpoint_io_remove
        remove(path=self.directory.marker_path(step))
        remove(path=self.directory.step_path(step))
        if _storage.exists(self.directory.step_path(step), self.directory.storage_options):
            raise CheckpointError(
                f"The checkpoint_io {self.active.config.checkpoint_io!r} did not remove "
                f"{self.directory.step_path(step)!r}; rotating resumable checkpoints needs checkpoint_io_remove."
            )
