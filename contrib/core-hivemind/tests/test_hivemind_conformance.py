"""The strategy conformance kit on one hivemind peer (a world of size 1: peers are not ranks)."""

from __future__ import annotations

from typing import ClassVar

from core_hivemind import HivemindStrategy

from core.testing import StrategyConformance


def lone_peer() -> HivemindStrategy:
    """A peer with nobody to meet: each step of the kit's batch (64) is one hivemind epoch."""
    return HivemindStrategy(target_batch_size=64, batch_size=64, run_id="conformance", matchmaking_time=0.5)


class TestHivemindConformance(StrategyConformance):
    plugin_factory = "test_hivemind_conformance:lone_peer"
    devices: ClassVar[int | None] = 1
