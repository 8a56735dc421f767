"""Preemption notices on any rank: every rank agrees on the same step, saves once, and stops.

A scheduler that preempts a job (SLURM before a requeue, a cloud's spot reclaim, ``kill``) may signal one rank,
some, or all of them, at any moment. Acting on the signal where it lands deadlocks a distributed run: the rank
that heard it saves and leaves while the others wait for it in the next collective. Here the signal handler
only records the notice; at the next step boundary every rank tells the others what it heard (one small
``all_gather``), so they all see the same answer at the same step, save one resumable checkpoint together and
stop with :data:`PREEMPTED_EXIT_CODE`.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from core._errors import ConfigurationError
from core.toolkit import PREEMPTED_EXIT_CODE
from core.trainer._requeue import Preempted, every_ranks

if TYPE_CHECKING:
    from core.lite import Lite



class PreemptionWatch:
    """Records preemption signals in this process; :meth:`agreed` turns them into one answer for every rank.

    :param signals: The signals that announce a preemption (``SIGTERM`` by default).
    """

    def __init__(self, signals: Sequence[int]) -> None:
        self.signals = tuple(int(number) for number in signals)
        self.received: int = 0  # the first signal number heard here, 0 for none
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if not self.signals:
            return
        if threading.current_thread() is not threading.main_thread():
            raise ConfigurationError(
                "Preemption signals can be handled only by the main thread: create the ResumableCheckpoints / "
                "FaultTolerance there, or pass preemption_signals=() and handle them yourself."
            )
        for number in self.signals:
            if number not in self._previous:
                self._previous[number] = signal.signal(number, self._on_signal)

    def uninstall(self) -> None:
        if self.received:
            # This process is stopping on the notice. It may come again on the way out (SLURM signals every
            # process, and `python -m core.run` passes on what it receives): it must not end the process
            # before it exits with PREEMPTED_EXIT_CODE, so the handler, which counts one notice, stays.
            return
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        if not self.received:
            self.received = number
            print(f"core: received {signal.Signals(number).name}; the run saves and stops at the next step",
                  file=sys.stderr, flush=True)

    def agreed(self, lite: Lite) -> tuple[int, list[int]]:
        """``(signal, ranks that received one)`` as every rank sees it now; ``(0, [])`` when none did.

        A collective when the run has several processes: call it on every rank at the same point.
        """
        per_rank = every_ranks(lite, self.received)
        ranks = [rank for rank, number in enumerate(per_rank) if number]
        return (per_rank[ranks[0]] if ranks else 0), ranks


def stop_message(step: int, number: int, ranks: Sequence[int], path: str | None) -> str:
    name = signal.Signals(number).name
    where = f"saved a resumable checkpoint at {path}" if path else "the checkpoint of this step was saved already"
    return (
        f"core: preempted by {name} (received by global rank(s) {list(ranks)}): every rank stopped after step "
        f"{step} and {where}. Run the same command again to resume from it (exit status {PREEMPTED_EXIT_CODE})."
    )


def on_preemption(
    watch: PreemptionWatch | None, lite: Lite, step: int, save: Callable[[], str | None]
) -> Preempted | None:
    """At a step boundary on every rank: if any rank was signalled, ``save()`` and return the stop to raise."""
    if watch is None:
        return None
    number, ranks = watch.agreed(lite)
    if not number:
        return None
    path = save()
    message = stop_message(step, number, ranks, path)
    return Preempted(message, step, signal.Signals(number).name, ranks, path)
