"""``OuterSync``: the outer loop of DiLoCo for the parameters of one optimizer.

The copy of the parameters taken at the last synchronisation (``snapshot``, the same on every group) is what the
outer optimizer steps. At a synchronisation each group sends ``snapshot - parameters`` (its pseudo-gradient) to
the others, the average becomes the snapshot's gradient, the outer optimizer steps the snapshot, and the
parameters take its value. Streaming DiLoCo does this for one fragment of the parameters at a time.

Parameters sharded inside a group (``DTensor`` s of fsdp or model_parallel on the group's mesh) are handled by
their local shards: a rank and its counterparts in the other groups hold the same slice of each parameter, so the
pseudo-gradient of the slice is averaged with theirs alone. The snapshot and the outer optimizer's state are
``DTensor`` s placed like the parameters, so a checkpoint shards or gathers them as it does the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from core import CheckpointError
from core.toolkit.strategies import accept_whole_optimizer_state, placed_like

from ._options import DiLoCoOptions

STATE_KEY: Final = "diloco"
"""The key under which an optimizer's state dict carries its outer state."""


@attrs.define
class Traffic:
    """What one rank passed to the collectives between groups: bytes, and how many collectives."""

    bytes: int = 0
    collectives: int = 0

    def add(self, *tensors: torch.Tensor) -> None:
        self.bytes += sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        self.collectives += len(tensors)


@attrs.define
class InFlight:
    """A fragment's pseudo-gradient on its way: the collectives' handles and what they fill."""

    fragment: int
    works: list[Any]
    payload: list[torch.Tensor]


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: the local shard of a ``DTensor``, the tensor itself otherwise."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def split_fragments(parameters: Sequence[torch.Tensor], count: int) -> list[list[int]]:
    """Indices of ``parameters`` in ``count`` contiguous fragments of about equal numbers of elements."""
    total = sum(parameter.numel() for parameter in parameters)
    fragments: list[list[int]] = [[] for _ in range(count)]
    seen = 0
    for index, parameter in enumerate(parameters):
        # A parameter goes to the fragment its middle element falls in, so sizes balance without splitting tensors.
        middle = seen + parameter.numel() / 2
        fragments[min(count - 1, int(middle * count / max(total, 1)))].append(index)
        seen += parameter.numel()
    return fragments


def build_outer_optimizer(options: DiLoCoOptions, snapshot: Sequence[torch.Tensor]) -> torch.optim.Optimizer:
    if callable(options.outer_optimizer):
        optimizer = options.outer_optimizer(list(snapshot))
        if not isinstance(optimizer, torch.optim.Optimizer):
            from core import ConfigurationError

            raise ConfigurationError(
                f"DiLoCoExtension(outer_optimizer={options.outer_optimizer!r}) returned a "
                f"{type(optimizer).__name__}; it must return a torch.optim.Optimizer over the parameters it is given."
            )
        return optimizer
    nesterov = options.outer_optimizer == "nesterov" and options.outer_momentum > 0
    return torch.optim.SGD(list(snapshot), lr=options.outer_lr, momentum=options.outer_momentum, nesterov=nesterov)


class OuterSync:
    """DiLoCo's outer loop over the parameters of one set-up optimizer.

    :param parameters: The parameters the inner optimizer steps, in its order (the same on every rank).
    :param options: The options in force when the optimizer was set up.
    :param group: The process group of this rank's counterparts in the other groups (the mesh's ``replicate``).
    :param traffic: Where the bytes sent to that group are counted.
    """

    def __init__(
        self, parameters: Sequence[torch.Tensor], options: DiLoCoOptions, group: Any, traffic: Traffic
    ) -> None:
        self.parameters = list(parameters)
        self.options = options
        self.group = group
        self.traffic = traffic
        self.groups = dist.get_world_size(group)
        with torch.no_grad():
            self.snapshot = [parameter.detach().clone() for parameter in self.parameters]
        self.outer = build_outer_optimizer(options, self.snapshot)
        if any(isinstance(tensor, DTensor) for tensor in self.snapshot):
            accept_whole_optimizer_state(self.outer)  # a gathered checkpoint holds whole momentum buffers
        self.fragments = split_fragments(self.parameters, options.fragments)
        self.inner_steps = 0
        self.in_flight: InFlight | None = None
        self.handles: list[Any] = []

    # -- the schedule: called by the inner optimizer's step hooks ----------------------------------------

    def before_inner_step(self) -> None:
        """Apply the fragment sent after the previous step, before this step's update lands on it."""
        if self.in_flight is not None:
            self.finish()

    def after_inner_step(self) -> None:
        self.inner_steps += 1
        fragment = self.options.due(self.inner_steps)
        if fragment is None:
            return
        self.send(fragment)
        if not self.options.overlaps:
            self.finish()

    # -- one synchronisation ----------------------------------------------------------------------------

    def send(self, fragment: int) -> None:
        """Start averaging the fragment's pseudo-gradient over the groups (without waiting)."""
        indices = self.fragments[fragment]
        with torch.no_grad():
            deltas = [local(self.snapshot[i]) - local(self.parameters[i]) for i in indices]
            flat = torch.cat([delta.reshape(-1).float() for delta in deltas])
        compression = self.options.compression
        if compression == "int8":
            scales = torch.stack([_absmax(delta) for delta in deltas]) / 127
            scale_per_element = torch.repeat_interleave(
                scales, torch.tensor([delta.numel() for delta in deltas], device=scales.device)
            )
            quantised = torch.round(flat / scale_per_element).clamp_(-127, 127).to(torch.int8)
            gathered = [torch.empty_like(quantised) for _ in range(self.groups)]
            gathered_scales = [torch.empty_like(scales) for _ in range(self.groups)]
            self.traffic.add(quantised, scales)
            works = [
                dist.all_gather(gathered, quantised, group=self.group, async_op=True),
                dist.all_gather(gathered_scales, scales, group=self.group, async_op=True),
            ]
            self.in_flight = InFlight(fragment, works, [*gathered, *gathered_scales])
            return
        payload = (flat / self.groups).to(torch.bfloat16) if compression == "bf16" else flat / self.groups
        self.traffic.add(payload)
        work = dist.all_reduce(payload, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        self.in_flight = InFlight(fragment, [work], [payload])

    def finish(self) -> None:
        """Wait for the fragment in flight, step the outer optimizer on it and copy the result into the parameters."""
        flight = self.in_flight
        if flight is None:
            return
        self.in_flight = None
        for work in flight.works:
            work.wait()
        indices = self.fragments[flight.fragment]
        sizes = [local(self.parameters[i]).numel() for i in indices]
        if self.options.compression == "int8":
            quantised, scales = flight.payload[: self.groups], flight.payload[self.groups:]
            counts = torch.tensor(sizes, device=scales[0].device)
            average = sum(
                (q.float() * torch.repeat_interleave(s, counts) for q, s in zip(quantised, scales, strict=True)),
                torch.zeros(sum(sizes), device=scales[0].device),
            ) / self.groups
        else:
            average = flight.payload[0].float()
        with torch.no_grad():
            for index, piece in zip(indices, torch.split(average, sizes), strict=True):
                snapshot = self.snapshot[index]
                gradient = piece.view_as(local(snapshot)).to(snapshot.dtype)
                if isinstance(snapshot, DTensor):
                    gradient = DTensor.from_local(gradient, snapshot.device_mesh, snapshot.placements,
                                                  run_check=False, shape=snapshot.shape, stride=snapshot.stride())
                snapshot.grad = gradient
            self.outer.step()
            for index in indices:
                self.snapshot[index].grad = None
                local(self.parameters[index]).copy_(local(self.snapshot[index]))

    # -- checkpoints: the outer state travels inside the inner optimizer's state dict --------------------

    def state_dict(self) -> dict[str, Any]:
        self.finish()
        return {
            "inner_steps": self.inner_steps,
            "snapshot": [tensor.detach().clone() for tensor in self.snapshot],
            "outer_optimizer": self.outer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        snapshot = state["snapshot"]
        if len(snapshot) != len(self.snapshot) or any(
            tuple(saved.shape) != tuple(mine.shape) for saved, mine in zip(snapshot, self.snapshot, strict=False)
        ):
            raise CheckpointError(
                f"The checkpoint's DiLoCo state holds {len(snapshot)} tensors of shapes "
                f"{[tuple(t.shape) for t in snapshot]}, but this optimizer has {len(self.snapshot)} parameters of "
                f"shapes {[tuple(t.shape) for t in self.snapshot]}; load it into the optimizer it was saved from."
            )
        self.in_flight = None
        self.inner_steps = int(state["inner_steps"])
        with torch.no_grad():
            for mine, saved in zip(self.snapshot, snapshot, strict=True):
                local(mine).copy_(local(placed_like(saved, mine)))
        self.outer.load_state_dict(state["outer_optimizer"])

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Hook this outer loop onto ``optimizer``'s steps and state dict."""
        self.handles = [
            optimizer.register_step_pre_hook(lambda *_: self.before_inner_step()),
            optimizer.register_step_post_hook(lambda *_: self.after_inner_step()),
            optimizer.register_state_dict_post_hook(self._add_to_state_dict),
            optimizer.register_load_state_dict_pre_hook(self._take_from_state_dict),
        ]

    def detach(self) -> None:
        """Unhook (at the end of the run: the group is about to go)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.group = None

    def _add_to_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        state[STATE_KEY] = self.state_dict()
        return state

    def _take_from_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        state = dict(state)
        outer = state.pop(STATE_KEY, None)
        if outer is not None:
            self.load_state_dict(outer)
        return state


def _absmax(tensor: torch.Tensor) -> torch.Tensor:
    """The largest magnitude of ``tensor`` (1 for an all-zero tensor, so the scale is never 0)."""
    largest = tensor.detach().abs().max().float()
    return torch.where(largest > 0, largest, torch.ones_like(largest))
