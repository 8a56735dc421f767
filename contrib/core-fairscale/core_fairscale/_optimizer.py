"""``ShardedOptimizer``: FairScale's ``OSS`` whose ``state_dict()`` is the whole optimizer's, on every rank.

``OSS`` keeps on each rank the state of the parameters that rank owns. Its own ``state_dict()`` answers only
after ``consolidate_state_dict()`` ran on every rank, and only on the rank the state was consolidated to; a
checkpoint taken any other way raises. Here ``state_dict()`` consolidates first, so that ``Lite.save``,
``Trainer.save_checkpoint`` and any code that asks an optimizer for its state get the state of a plain torch
optimizer over all parameters: it loads into this class at any world size (each rank keeps its part) and into the
plain optimizer on one process.

Consolidating is a collective: every rank calls ``state_dict()`` at the same point, as ``Lite.save`` does. OSS
broadcasts each rank's shard to every rank whichever rank it consolidates to, so keeping it everywhere costs no
extra communication; each rank holds the whole state (on the CPU) only until the returned dict is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from fairscale.optim import OSS

from core import ConfigurationError

EVERY_RANK = -1
"""``consolidate_state_dict``'s recipient meaning "all ranks"."""


class ShardedOptimizer(OSS):
    """``OSS(params, optim=..., **defaults)`` with a whole-optimizer ``state_dict()`` (collective)."""

    def adopt_process_group(self) -> None:
        """Use the current run's world group when the run this optimizer was made in has ended.

        The strategy drops the group from the optimizer when its run ends (a destroyed group held there would be
        freed at interpreter shutdown, where gloo can abort). ``Trainer.save_checkpoint`` after ``fit`` writes
        through a short run of its own, with a new group of the same ranks: the optimizer takes that one.
        """
        if getattr(self, "group", None) is not None:
            return
        if not dist.is_initialized():
            raise ConfigurationError(
                "This ShardedOptimizer's run has ended and no process group exists: its state_dict() and step() are "
                "collectives over the ranks, available inside a run (Lite.launch, Trainer.fit) only."
            )
        if (dist.get_world_size(), dist.get_rank()) != (self.world_size, self.rank):
            raise ConfigurationError(
                f"This ShardedOptimizer was sharded over {self.world_size} ranks (this one rank {self.rank}), but the "
                f"current run has {dist.get_world_size()} (this one rank {dist.get_rank()}); save its state in the run "
                f"that made it, and load it into an optimizer set up in the new run."
            )
        self.group = dist.group.WORLD

    def step(self, closure: Callable[[], float] | None = None, **kwargs: Any) -> float | None:
        self.adopt_process_group()
        result: float | None = super().step(closure, **kwargs)
        return result

    def state_dict(self, all_ranks: bool = False) -> dict[str, Any]:
        """The state of every parameter, indexed as a plain torch optimizer over the same groups would be."""
        self.adopt_process_group()
        self.consolidate_state_dict(recipient_rank=EVERY_RANK)
        try:
            whole: dict[str, Any] = super().state_dict()
        finally:
            # The returned dict holds the tensors; the optimizer keeps only its shard.
            self._all_states: list[dict[str, Any]] = []
        return whole

    def local_state_tensors(self) -> Iterator[torch.Tensor]:
        """The tensors of this rank's shard of the state (what sharding saves memory on)."""
        for state in self.optim.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    yield value

    def owned_parameters(self) -> list[torch.Tensor]:
        """The parameters whose state this rank keeps and whose gradient it receives."""
        return [parameter for group in self.optim.param_groups for parameter in group["params"]]
