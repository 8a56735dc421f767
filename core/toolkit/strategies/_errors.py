"""Errors of the process-group strategies: a collective that failed, and a job whose processes failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from core import CoreError

# Fragments of gloo / TCPStore / NCCL messages, lower-cased, by what they mean.
_TIMEOUT_MARKERS: Final = ("timed out", "timeout", "deadline exceeded")
_PEER_LOST_MARKERS: Final = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "connection refused",
    "socket closed",
    "remote worker crashing",
)


def is_timeout(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, CollectiveTimeoutError) or any(marker in text for marker in _TIMEOUT_MARKERS)


def is_peer_lost(error: BaseException) -> bool:
    """Whether ``error`` only says that another rank vanished (a consequence, not the cause)."""
    text = str(error).lower()
    return isinstance(error, PeerLostError) or any(marker in text for marker in _PEER_LOST_MARKERS)


class CollectiveError(CoreError, RuntimeError):
    """A collective operation (all_reduce, barrier, ...) failed on this rank."""

    def __init__(self, message: str, collective: str, global_rank: int) -> None:
        super().__init__(message)
        self.collective = collective
        self.global_rank = global_rank


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A collective did not complete within the strategy's ``timeout``: another rank stopped participating."""

    def __init__(
        self, collective: str, global_rank: int, timeout: timedelta, cause: BaseException, stacks: str = ""
    ) -> None:
        where = (f"\nWhere the other ranks were when this rank gave up (their Python stacks):\n{stacks}"
                 if stacks else "")
        super().__init__(
            f"The collective {collective!r} on global rank {global_rank} did not complete within the strategy's "
            f"timeout of {timeout.total_seconds():g} s: at least one other rank stopped participating (it hangs, "
            f"sleeps, or runs a different collective). Look at the other ranks' output; if the work between "
            f"collectives is legitimately this slow, raise the strategy's timeout (DDPStrategy(timeout=...), ...). "
            f"Backend message: {cause}{where}",
            collective,
            global_rank,
        )
        self.stacks = stacks


class PeerLostError(CollectiveError):
    """A collective failed because another rank exited or crashed."""

    def __init__(self, collective: str, global_rank: int, cause: BaseException) -> None:
        super().__init__(
            f"The collective {collective!r} on global rank {global_rank} failed because another rank exited or "
            f"crashed; its own error is the cause to look for. Backend message: {cause}",
            collective,
            global_rank,
        )


class ProcessFailedError(CoreError):
    """A process started by a :class:`MultiprocessingLauncher` (``ddp_spawn``, ``ddp_fork``, ``ddp_notebook``, ...)
    failed; the others were stopped."""

    def __init__(self, message: str, global_rank: int, exit_code: int) -> None:
        super().__init__(message)
        self.global_rank = global_rank
        self.exit_code = exit_code


def translate(error: BaseException, collective: str, global_rank: int, timeout: timedelta) -> BaseException:
    """The project error for a backend error raised by ``collective``, or ``error`` itself if unrelated."""
    if isinstance(error, CollectiveError) or not isinstance(error, RuntimeError):
        return error
    if is_peer_lost(error):
        return PeerLostError(collective, global_rank, error)
    if is_timeout(error):
        return CollectiveTimeoutError(collective, global_rank, timeout, error)
    return error
