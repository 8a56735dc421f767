"""core-pipeline: the ``pipeline`` strategy of ``core`` (pipeline parallelism on ``torch.distributed.pipelining``).

The model is cut into stages (by the names of the submodules that begin them, or by a function), each rank runs its
stages in a schedule of micro-batches (``GPipe``, ``1F1B``, ``Interleaved1F1B``), and copies of the pipeline can run
data-parallel on a 2-D mesh ``("data_parallel", "pipeline_parallel")``. Checkpoints are written in the unsplit model's
layout, so they load into one process, other strategies and other splits. ``PipelineStrategy(...)`` is the object to
pass; the ``pipeline`` alias alone has no split and says so.
"""

from __future__ import annotations

from ._module import PipelineModule
from ._split import Split, prune, split_at, view
from ._strategy import MESH_DIMENSIONS, PIPELINE_PARALLEL, SCHEDULES, PipelineStrategy


def pipeline() -> PipelineStrategy:
    """``pipeline``: without a split; a run refuses it, saying to pass ``PipelineStrategy(split_points=..., ...)``."""
    return PipelineStrategy()


__all__ = [
    "MESH_DIMENSIONS",
    "PIPELINE_PARALLEL",
    "SCHEDULES",
    "PipelineModule",
    "PipelineStrategy",
    "Split",
    "pipeline",
    "prune",
    "split_at",
    "view",
]
