"""core-model-parallel: the ``model_parallel`` strategy of ``core`` (Lightning's ``ModelParallelStrategy``).

Tensor parallelism within a node and fully sharded data parallelism across nodes, on a 2-D ``DeviceMesh`` with the
dimensions ``("data_parallel", "tensor_parallel")``. The user's parallelize function applies the parallelisms
(``torch.distributed.tensor.parallel.parallelize_module``, ``torch.distributed.fsdp.fully_shard``); checkpoints are
sharded through core-dcp's ``distributed`` checkpoint_io and load into any other mesh, or into one process.
``ModelParallelStrategy(...)`` is the object to pass for options. After a run the module stays parallelized (its
process group is kept while it lives); :func:`full_state_dict` gathers it whole, one tensor at a time, to rank 0.

The degrees and the mesh are the core's :class:`core.toolkit.strategies.ParallelDims` (the strategy's
``parallel_dims``); :data:`DATA_PARALLEL` and :data:`TENSOR_PARALLEL` are the toolkit's names, re-exported.
"""

from __future__ import annotations

from core.toolkit.strategies import DATA_PARALLEL, TENSOR_PARALLEL, full_state_dict

from ._strategy import MESH_DIMENSIONS, ModelParallelStrategy


def model_parallel() -> ModelParallelStrategy:
    """``model_parallel``: tensor parallel across a node's devices, data parallel across nodes."""
    return ModelParallelStrategy()


__all__ = [
    "DATA_PARALLEL",
    "MESH_DIMENSIONS",
    "TENSOR_PARALLEL",
    "ModelParallelStrategy",
    "full_state_dict",
    "model_parallel",
]
