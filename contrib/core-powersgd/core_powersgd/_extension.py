"""``PowerSGDExtension``: a ``wrapper=True`` implementation of ``strategy_configure_ddp``.

No ``from __future__ import annotations`` here: DDP inspects a communication hook's annotations at
registration and accepts only the real ``dist.GradBucket`` and ``Future`` objects, not their names.
"""

import warnings
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from core import ActiveSet, ConfigurationError, CoreWarning, hookimpl
from core.toolkit import check_whole, is_whole

CommHook = Callable[[Any, Any], Any]

# PowerSGD's error feedback and warm start need DDP's buckets to be final, which they are from the
# third iteration: torch refuses start_powerSGD_iter <= 1 with either enabled.
MIN_WARMUP: Final = 2


def one_bucket_at_a_time(hook: CommHook) -> CommHook:
    """``hook`` finishing each bucket's communication before DDP hands it the next bucket.

    gloo pairs the collectives of different ranks by the order in which they are issued. PowerSGD issues a
    bucket's second all-reduce from a callback of its first, so with two buckets in flight the ranks can
    issue them in different orders, and gloo aborts ("Received data size doesn't match expected size").
    Waiting here keeps the order the same on every rank, at the cost of overlapping communication with the
    rest of the backward pass.
    """

    def in_order(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        future: torch.futures.Future[torch.Tensor] = hook(state, bucket)
        future.wait()
        return future

    return in_order


class PowerSGDExtension:
    """Gradient compression for the DDP-family strategies, through torch's DDP communication hooks.

    :param rank: PowerSGD's matrix approximation rank: each gradient matrix travels as two thin matrices
        of this many columns. 1 compresses most; 2 to 4 keep more of the gradient.
    :param warmup: Steps of plain all-reduce before compression starts (PowerSGD's ``start_powerSGD_iter``);
        at least 2 while ``error_feedback`` or ``warm_start`` is on.
    :param fp16: Send what is communicated as float16 (halves the bytes; with ``powersgd`` it halves the
        compressed matrices).
    :param powersgd: Compress with PowerSGD; ``False`` with ``fp16=True`` gives fp16 compression alone.
    :param min_compression_rate: Send a tensor uncompressed unless PowerSGD shrinks it at least this much.
    :param error_feedback: Carry each step's compression error into the next (PowerSGD's default).
    :param warm_start: Reuse the previous step's factors as the starting point (PowerSGD's default).
    """

    kind: Final = "extension"
    name: Final = "powersgd"
    contract_version: Final = 1

    def __init__(
        self,
        rank: int = 1,
        warmup: int = 10,
        fp16: bool = False,
        powersgd: bool = True,
        min_compression_rate: float = 2.0,
        error_feedback: bool = True,
        warm_start: bool = True,
    ) -> None:
        if not (powersgd or fp16):
            raise ConfigurationError(
                "PowerSGDExtension(powersgd=False, fp16=False) compresses nothing; pass powersgd=True, fp16=True "
                "or both, or leave 'powersgd' out of plugins=[...]."
            )
        self.rank = check_whole("PowerSGDExtension", "rank", rank, 1)
        minimum = MIN_WARMUP if powersgd and (error_feedback or warm_start) else 0
        if is_whole(warmup, 0) and warmup < minimum:
            raise ConfigurationError(
                f"PowerSGDExtension(warmup={warmup}) is too short: with error_feedback or warm_start, PowerSGD needs "
                f"at least {MIN_WARMUP} steps of plain all-reduce while DDP settles its buckets; pass "
                f"warmup={MIN_WARMUP} or more."
            )
        self.warmup = check_whole("PowerSGDExtension", "warmup", warmup, 0)
        if min_compression_rate <= 0:
            raise ConfigurationError(
                f"PowerSGDExtension(min_compression_rate={min_compression_rate!r}) must be positive."
            )
        self.fp16 = fp16
        self.powersgd = powersgd
        self.min_compression_rate = min_compression_rate
        self.error_feedback = error_feedback
        self.warm_start = warm_start
        self.states: list[Any] = []
        """The hook state of each module set up so far (``PowerSGDState`` holds ``iter``)."""

    def __repr__(self) -> str:
        return (
            f"PowerSGDExtension(rank={self.rank}, warmup={self.warmup}, fp16={self.fp16}, powersgd={self.powersgd})"
        )

    def communication_hook(self, process_group: Any | None = None) -> tuple[Any, CommHook]:
        """A fresh ``(state, hook)`` pair for ``DistributedDataParallel.register_comm_hook``."""
        if not self.powersgd:
            return process_group, default_hooks.fp16_compress_hook
        state = powerSGD_hook.PowerSGDState(
            process_group=process_group,
            matrix_approximation_rank=self.rank,
            start_powerSGD_iter=self.warmup,
            min_compression_rate=self.min_compression_rate,
            use_error_feedback=self.error_feedback,
            warm_start=self.warm_start,
        )
        hook: CommHook = powerSGD_hook.powerSGD_hook
        if self.fp16:
            hook = default_hooks.fp16_compress_wrapper(hook)
        if dist.is_initialized() and dist.get_backend(process_group) == "gloo":
            hook = one_bucket_at_a_time(hook)
        return state, hook

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        wraps_ddp = any(
            not (impl.wrapper or impl.hookwrapper) for impl in active.hook.strategy_configure_ddp.get_hookimpls()
        )
        if not wraps_ddp:
            warnings.warn(
                f"The powersgd extension compresses DistributedDataParallel's gradients, but the strategy "
                f"{active.config.strategy!r} does not wrap modules in it (it implements no strategy_configure_ddp), "
                f"so nothing is compressed. Use a DDP-family strategy such as strategy='ddp'.",
                CoreWarning,
                stacklevel=2,
            )

    @hookimpl(wrapper=True)
    def strategy_configure_ddp(
        self, module: torch.nn.Module, device_ids: Sequence[int] | None
    ) -> Generator[None, torch.nn.Module, torch.nn.Module]:
        wrapped = yield
        register = getattr(wrapped, "register_comm_hook", None)
        if register is None:
            raise ConfigurationError(
                f"The powersgd extension registers a communication hook on the module that strategy_configure_ddp "
                f"returns, but got a {type(wrapped).__name__}, which has no register_comm_hook. Use it with a "
                f"strategy built on torch's DistributedDataParallel."
            )
        state, hook = self.communication_hook(getattr(wrapped, "process_group", None))
        register(state, hook)
        self.states.append(state)
        return wrapped

    @hookimpl(wrapper=True)
    def strategy_teardown(self) -> Generator[None, None, None]:
        # The states outlive the run (they can be read afterwards), but the process group they name must not:
        # a group still referenced after destroy_process_group keeps gloo's threads alive until interpreter
        # exit, where they abort the process ("terminate called without an active exception").
        for state in self.states:
            if hasattr(state, "process_group"):
                state.process_group = None
        self.states = [None if isinstance(state, dist.ProcessGroup) else state for state in self.states]
        return (yield)
