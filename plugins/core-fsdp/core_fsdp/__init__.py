"""core-fsdp: the ``fsdp`` strategy of ``core``, on FSDP2 (``torch.distributed.fsdp.fully_shard``).

``strategy="fsdp"`` shards every parameter over all ranks and writes sharded checkpoints through the
``distributed`` checkpoint_io (core-dcp); ``strategy="fsdp_cpu_offload"`` also keeps the shards in CPU memory.
``FSDPStrategy(...)`` is the object to pass for options. After a run the module stays sharded (its process group
is kept while it lives); :func:`full_state_dict` gathers it whole, one tensor at a time, to rank 0.
"""

from __future__ import annotations

from core.toolkit.strategies import full_state_dict

from ._state import local_elements
from ._strategy import MIXED_PARAMETER_DTYPES, STATE_DICT_TYPES, FSDPStrategy
from ._wrap import units as auto_wrap_units


def fsdp() -> FSDPStrategy:
    """``fsdp``: parameters, gradients and optimizer state sharded over every rank; sharded checkpoints."""
    return FSDPStrategy()


def fsdp_cpu_offload() -> FSDPStrategy:
    """``fsdp_cpu_offload``: ``fsdp`` with the shards kept in CPU memory between uses."""
    return FSDPStrategy(cpu_offload=True, name="fsdp_cpu_offload")


__all__ = [
    "MIXED_PARAMETER_DTYPES",
    "STATE_DICT_TYPES",
    "FSDPStrategy",
    "auto_wrap_units",
    "fsdp",
    "fsdp_cpu_offload",
    "full_state_dict",
    "local_elements",
]
