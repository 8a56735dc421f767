"""core-fairscale: FairScale's sharded data parallelism for ``core``, as Lightning 1.x offered it.

``strategy="ddp_sharded"`` (processes started by running the script again, as ``ddp``) and
``strategy="ddp_sharded_spawn"`` (started by ``torch.multiprocessing``, as ``ddp_spawn``) shard the optimizer state
and the gradients over the ranks: each optimizer becomes FairScale's ``OSS`` (:class:`ShardedOptimizer`), the
module is wrapped in ``ShardedDataParallel``. ``DDPShardedStrategy(...)`` is the object to pass for options.

FairScale is unmaintained since 2022; ``strategy="fsdp"`` (core-fsdp) is its successor. Using this strategy says
so once per process (a :class:`core.CoreWarning`).
"""

from __future__ import annotations

from typing import Any

from ._optimizer import ShardedOptimizer
from ._strategy import REDUCE_BUFFER_SIZE_MULTI_NODE, SCALED_PRECISIONS, UNMAINTAINED, DDPShardedStrategy


class DDPSpawnShardedStrategy(DDPShardedStrategy):
    """Lightning 1.x's name for ``ddp_sharded_spawn``: :class:`DDPShardedStrategy` with ``start_method="spawn"``."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("start_method", "spawn")
        super().__init__(**options)


def ddp_sharded() -> DDPShardedStrategy:
    """``ddp_sharded``: the script is run again as the other local ranks (unless a launcher already started them)."""
    return DDPShardedStrategy(start_method="popen")


def ddp_sharded_spawn() -> DDPShardedStrategy:
    """``ddp_sharded_spawn``: fresh processes via ``torch.multiprocessing`` spawn; rank 0's return value comes back."""
    return DDPShardedStrategy(start_method="spawn")


__all__ = [
    "REDUCE_BUFFER_SIZE_MULTI_NODE",
    "SCALED_PRECISIONS",
    "UNMAINTAINED",
    "DDPShardedStrategy",
    "DDPSpawnShardedStrategy",
    "ShardedOptimizer",
    "ddp_sharded",
    "ddp_sharded_spawn",
]
