"""core-dcp: the ``distributed`` checkpoint_io of ``core``, on ``torch.distributed.checkpoint``.

Select it with ``plugins=["distributed"]`` (sharding strategies such as ``fsdp`` pick it by default), or
pass ``DistributedCheckpointIO(thread_count=..., sync_files=...)`` for options.
"""

from __future__ import annotations

from ._checkpoint_io import DistributedCheckpointIO
from ._layout import SKELETON_KEY, TENSOR_TAG, holds_dtensors

__all__ = ["SKELETON_KEY", "TENSOR_TAG", "DistributedCheckpointIO", "holds_dtensors"]
