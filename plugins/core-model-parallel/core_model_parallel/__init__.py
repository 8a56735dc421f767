"""core-model-parallel: the ``model_parallel`` strategy of ``core`` (Lightning's ``ModelParallelStrategy``).

Tensor parallelism within a node and fully sharded data parallelism across nodes, on a 2-D ``DeviceMesh`` with the
dimensions ``("data_parallel", "tensor_parallel")``. The user's parallelize function applies the parallelisms
(``torch.distributed.tensor.parallel.parallelize_module``, ``torch.distributed.fsdp.fully_shard``); checkpoints are
sharded through core-dcp's ``distributed`` checkpoint_io and load into any other mesh, or into one process.
``ModelParallelStrategy(...)`` is the object to pass for options. After a run the module stays parallelized (its
process group is kept while it lives); :func:`full_state_dict` gathers it whole, one tensor at a time, to rank 0.

Public API for strategies that build a mesh of their own (core-pipeline): :class:`MeshShape` and
:func:`mesh_shape`, which check the degrees of parallelism against the world size, and :func:`built_mesh`, the
``device_mesh`` property's check.
"""

from __future__ import annotations

from core.toolkit.strategies import full_state_dict

from ._mesh import AUTO, DATA_PARALLEL, MeshShape, built_mesh, check_size, mesh_shape
from ._strategy import MESH_DIMENSIONS, TENSOR_PARALLEL, ModelParallelStrategy


def model_parallel() -> ModelParallelStrategy:
    """``model_parallel``: tensor parallel across a node's devices, data parallel across nodes."""
    return ModelParallelStrategy()


__all__ = [
    "AUTO",
    "DATA_PARALLEL",
    "MESH_DIMENSIONS",
    "TENSOR_PARALLEL",
    "MeshShape",
    "ModelParallelStrategy",
    "built_mesh",
    "check_size",
    "full_state_dict",
    "mesh_shape",
    "model_parallel",
]
