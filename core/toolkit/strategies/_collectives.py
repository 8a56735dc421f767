"""Collective operations over ``torch.distributed``, with backend errors turned into project errors.

Every function takes the name it reports under, so a rank that stops participating shows up as
"the collective 'all_reduce' did not complete within 5 s" rather than a gloo buffer message, followed by where
the other ranks were: their Python stacks, dumped when this rank gave up (:mod:`._stacks`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Final, TypeVar

import torch
import torch.distributed as dist

from ._errors import CollectiveTimeoutError, translate
from ._settle import settle
from ._stacks import other_ranks_stacks, register_stack

_Result = TypeVar("_Result")

_REDUCE_OPS: Final = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                      "min": dist.ReduceOp.MIN}
# gloo reduces these dtypes poorly or not at all; they travel as float32 and come back in their dtype.
_WIDENED: Final = (torch.bfloat16, torch.float16, torch.bool)


def _gather(tensor: torch.Tensor, group: Any | None) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor, group=group)
    return torch.stack(parts)


class _GatherWithGradients(torch.autograd.Function):
    """All-gather whose backward sums the gradients of every rank's copy and returns this rank's share."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any | None) -> torch.Tensor:
        ctx.group = group
        return _gather(tensor, group)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor, None]:
        gradient = grad_outputs[0].contiguous()
        dist.all_reduce(gradient, op=dist.ReduceOp.SUM, group=ctx.group)
        return gradient[dist.get_rank(ctx.group)], None


class Communicator:
    """The collectives of one rank: knows its rank and timeout for the errors it raises."""

    def __init__(self, global_rank: int, timeout: timedelta) -> None:
        self.global_rank = global_rank
        self.timeout = timeout
        self._stack_registered = False

    @contextmanager
    def guard(self, collective: str) -> Iterator[None]:
        """Re-raise a backend error of ``collective`` as a :class:`CollectiveError` naming it; a timeout also
        carries the other ranks' Python stacks (each rank registers its stack dump at its first guarded call with a
        process group up)."""
        if not self._stack_registered and dist.is_initialized():
            self._stack_registered = register_stack(self.global_rank) or True  # one try per run
        try:
            yield
        except RuntimeError as error:
            translated = translate(error, collective, self.global_rank, self.timeout)
            if translated is error:
                raise
            if isinstance(translated, CollectiveTimeoutError):
                translated = CollectiveTimeoutError(collective, self.global_rank, self.timeout, error,
                                                    stacks=other_ranks_stacks(self.global_rank))
            raise translated from error

    def call(self, collective: str, function: Callable[..., _Result], *args: Any, **kwargs: Any) -> _Result:
        with self.guard(collective):
            return function(*args, **kwargs)

    def reduce(self, tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
        """``sum`` / ``mean`` / ``max`` / ``min`` of ``tensor`` over the group, as a new tensor."""
        original_dtype = tensor.dtype
        if reduce_op == "mean" and not (tensor.is_floating_point() or tensor.is_complex()):
            work = tensor.to(torch.get_default_dtype())
        elif original_dtype in _WIDENED:
            work = tensor.to(torch.float32)
        else:
            work = tensor.clone()
        work = work.contiguous()
        self.call("all_reduce", dist.all_reduce, work, op=_REDUCE_OPS[reduce_op], group=group)
        if reduce_op == "mean":
            work = work / dist.get_world_size(group)
        if original_dtype in _WIDENED and (reduce_op != "mean" or original_dtype != torch.bool):
            work = work.to(original_dtype)
        return work

    def all_gather(self, tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
        """Shape ``(world_size, *tensor.shape)``; with ``sync_grads`` gradients flow back to each rank."""
        tensor = tensor.contiguous()
        with self.guard("all_gather"):
            if sync_grads:
                gathered: torch.Tensor = _GatherWithGradients.apply(tensor, group)
                return gathered
            return _gather(tensor, group)

    def broadcast(self, obj: Any, src: int, device: torch.device | None) -> Any:
        """Any picklable object (tensors included, whatever their shape on the receivers) from ``src``."""
        holder = [obj]
        self.call("broadcast", dist.broadcast_object_list, holder, src=src, device=device)
        received = holder[0]
        if isinstance(received, torch.Tensor) and device is not None:
            return received.to(device)
        return received

    def barrier(self, name: str | None, device_ids: list[int] | None) -> None:
        self.call(f"barrier {name!r}" if name else "barrier", dist.barrier, device_ids=device_ids)

    def last_barrier(self, device_ids: list[int] | None) -> None:
        """The teardown's barrier, after which the process may end: gloo's worker threads are idle when it returns.

        The barrier's operation stays referenced here until :func:`settle` saw the workers asleep, so that it, and
        the operations it waited for, are freed on this thread with the GIL rather than on a worker that could
        still be freeing them when the interpreter shuts down (:mod:`._settle`).
        """
        label = "barrier 'teardown'"
        work = self.call(label, dist.barrier, async_op=True, device_ids=device_ids)
        if work is not None:
            self.call(label, work.wait)
        settle()
        del work
