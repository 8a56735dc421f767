"""``Lite``: your own PyTorch loop on any resolved active set (the counterpart of Lightning's Fabric)."""

from __future__ import annotations

from core.lite._flops import get_available_flops
from core.lite._lite import Lite
from core.lite._seed import seed_everything
from core.lite._throughput import Throughput, ThroughputMonitor, measure_flops
from core.lite._wrappers import LiteDataLoader, LiteModule, LiteOptimizer

__all__ = [
    "Lite",
    "LiteDataLoader",
    "LiteModule",
    "LiteOptimizer",
    "Throughput",
    "ThroughputMonitor",
    "get_available_flops",
    "measure_flops",
    "seed_everything",
]
