"""core's strategy kit on ``ddp_sharded``: 2 processes over gloo, collectives, the 1-process equivalence,
a checkpoint round trip through ``Lite.save`` / ``Lite.load`` (the sharded optimizer state consolidated on save),
and a clean end."""

from core.testing import StrategyConformance


class TestDDPShardedStrategy(StrategyConformance):
    alias = "ddp_sharded"
