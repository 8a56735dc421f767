"""core's strategy conformance kit against ``model_parallel``: every check applies.

The kit builds its own models (``Linear`` layers) and knows nothing of a tensor-parallel plan, so the strategy under
test gets a parallelize function that only shards over the data-parallel dimension of a 2x1 mesh: with it the kit's
collectives, the equivalence of 2 ranks x batch 32 with 1 process x batch 64 (atol 1e-6), the checkpoint round trip
(sharded, through core-dcp) and the clean teardown all apply. The tensor-parallel layouts are tested against the
same expectations in test_model_parallel_training.py.
"""

from __future__ import annotations

from typing import Any

import torch
from core_model_parallel import ModelParallelStrategy

from core.testing import StrategyConformance


def shard_over_data_parallel(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def data_parallel_2x1() -> ModelParallelStrategy:
    return ModelParallelStrategy(shard_over_data_parallel, data_parallel_size=2, tensor_parallel_size=1)


class TestModelParallelConformance(StrategyConformance):
    plugin_factory = "test_model_parallel_conformance:data_parallel_2x1"
