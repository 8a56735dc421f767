"""``ParallelDims``, the run's degrees of parallelism, and the protocols strategies see the runtime's objects through.

The degrees are checked without processes here (hypothesis over degrees and world sizes); the mesh they build is
checked on real 4-process gloo jobs by contrib/core-diloco/tests/test_diloco_sharded.py (fsdp and model_parallel
as copies side by side) and on 2 processes by plugins/core-pipeline/tests/test_pipeline_training.py.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import core
from core.module import Module, StatefulList, StepModule
from core.toolkit.strategies import (
    AUTO,
    DATA_PARALLEL,
    MESH_DIMENSIONS,
    PIPELINE_PARALLEL,
    REPLICATE,
    TENSOR_PARALLEL,
    OptimizerWrapper,
    ParallelDims,
    StatefulGroup,
    StepRunner,
    check_degree,
    fit_degrees,
)

degree = st.integers(min_value=1, max_value=4)
degrees = st.fixed_dictionaries({f"{name}_size": degree for name in MESH_DIMENSIONS})


@given(degrees, st.integers(min_value=1, max_value=300))
def test_degrees_are_accepted_exactly_when_they_multiply_to_the_world_size(sizes: dict[str, Any], world: int) -> None:
    product = math.prod(sizes.values())
    if product == world:
        dims = ParallelDims(world, **sizes)
        assert math.prod(dims.sizes) == world
        assert all(dims.size(name) == sizes[f"{name}_size"] for name in MESH_DIMENSIONS)
        return
    with pytest.raises(core.ConfigurationError) as raised:
        ParallelDims(world, **sizes, owner="MyStrategy", layout="devices=3 per node x num_nodes=1")
    message = str(raised.value)
    # Every factor of the product is printed, then the product and the world size it misses.
    factors = " x ".join(f"{name}_size ({sizes[f'{name}_size']})" for name in MESH_DIMENSIONS
                         if sizes[f"{name}_size"] > 1)
    assert message.startswith(f"MyStrategy: {factors or 'data_parallel_size (1)'} = {product}, ")
    assert f"but the run has world size {world} (devices=3 per node x num_nodes=1)" in message
    assert "must multiply to the world size" in message


@given(degrees, st.data())
def test_coordinates_are_row_major_and_the_samplers_split_along_replicate_and_data_parallel(
    sizes: dict[str, Any], data: st.DataObject
) -> None:
    dims = ParallelDims(math.prod(sizes.values()), **sizes)
    rank = data.draw(st.integers(min_value=0, max_value=dims.world_size - 1))
    where = dims.coordinates(rank)
    rebuilt = 0
    for name in MESH_DIMENSIONS:  # outermost first: the innermost dimension joins neighbouring ranks
        rebuilt = rebuilt * dims.size(name) + where[name]
    assert rebuilt == rank
    num_replicas, sampler_rank = dims.sampler_split(rank)
    assert num_replicas == dims.size(REPLICATE) * dims.size(DATA_PARALLEL)
    assert sampler_rank == where[REPLICATE] * dims.size(DATA_PARALLEL) + where[DATA_PARALLEL]
    # A rank that differs only along context, pipeline or tensor parallelism sees the same samples.
    same_replica = [other for other in range(dims.world_size)
                    if all(dims.coordinates(other)[name] == where[name] for name in (REPLICATE, DATA_PARALLEL))]
    assert {dims.sampler_split(other) for other in same_replica} == {(num_replicas, sampler_rank)}


@given(degrees, st.integers(min_value=1, max_value=4))
def test_copies_side_by_side_put_replicate_outermost_even_at_one(sizes: dict[str, Any], copies: int) -> None:
    sizes["replicate_size"] = 1
    dims = ParallelDims(math.prod(sizes.values()), **sizes)
    replicated = dims.replicated(copies)
    assert replicated.world_size == dims.world_size * copies
    assert replicated.names[0] == REPLICATE and replicated.sizes[0] == copies
    assert replicated.names[1:] == dims.names
    with pytest.raises(core.ConfigurationError, match="holds copies side by side already"):
        replicated.replicated(2)


def test_the_mesh_names_the_dimensions_above_one_and_those_kept() -> None:
    assert ParallelDims(8, data_parallel_size=2, tensor_parallel_size=4).names == (DATA_PARALLEL, TENSOR_PARALLEL)
    assert ParallelDims(4, tensor_parallel_size=4).names == (TENSOR_PARALLEL,)
    kept = ParallelDims(4, tensor_parallel_size=4, always=[DATA_PARALLEL])
    assert (kept.names, kept.sizes, str(kept)) == ((DATA_PARALLEL, TENSOR_PARALLEL), (1, 4),
                                                   "data_parallel=1 x tensor_parallel=4")
    assert ParallelDims(1).names == (DATA_PARALLEL,)  # a mesh has at least one dimension
    with pytest.raises(core.ConfigurationError, match=r"names \['expert'\], not dimensions of a mesh"):
        ParallelDims(1, always=["expert"])
    with pytest.raises(core.ConfigurationError, match=r"'expert' is not a dimension of a mesh"):
        ParallelDims(1).size("expert")
    with pytest.raises(core.ConfigurationError, match="outside a world of size 4"):
        ParallelDims(4, data_parallel_size=4).coordinates(4)


def test_the_mesh_is_read_only_once_built() -> None:
    with pytest.raises(core.ConfigurationError, match="built when the run's process group exists"):
        _ = ParallelDims(2, data_parallel_size=2).world_mesh


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=4),
       st.one_of(st.just(AUTO), degree), st.one_of(st.just(AUTO), degree))
def test_two_options_are_fitted_to_the_processes_or_refused_with_the_sizes_that_fit(
    devices: int, nodes: int, outer: int | str, inner: int | str
) -> None:
    world = devices * nodes
    given = [size for size in (outer, inner) if isinstance(size, int)]
    # Both 'auto' always fit; one 'auto' fits when the other divides the world; two sizes when they multiply to it.
    fits = (world % given[0] == 0) if len(given) == 1 else (not given or math.prod(given) == world)
    if not fits:
        with pytest.raises(core.ConfigurationError) as raised:
            fit_degrees("PipelineStrategy", (DATA_PARALLEL, outer), (PIPELINE_PARALLEL, inner),  # type: ignore[arg-type]
                        devices, nodes)
        for size in (size for size in range(1, world + 1) if world % size == 0):  # every pair that fits is listed
            assert f"data_parallel_size={size}, pipeline_parallel_size={world // size}" in str(raised.value)
        return
    dims = fit_degrees("PipelineStrategy", (DATA_PARALLEL, outer), (PIPELINE_PARALLEL, inner),  # type: ignore[arg-type]
                       devices, nodes)
    assert dims.names == (DATA_PARALLEL, PIPELINE_PARALLEL)  # both kept, even at 1
    assert dims.world_size == world
    if outer == inner == AUTO:  # the inner dimension within a node, the outer across nodes
        assert dims.sizes == (nodes, devices)
    for given_size, size in zip((outer, inner), dims.sizes, strict=True):
        assert given_size in (AUTO, size)


@pytest.mark.parametrize("value", [0, -1, "two", True, 1.5, None])
def test_a_degree_option_is_a_positive_int_or_auto(value: object) -> None:
    with pytest.raises(core.ConfigurationError, match=rf"MyStrategy\(context_parallel_size={value!r}\): expected"):
        check_degree("MyStrategy", "context_parallel_size", value)
    assert check_degree("MyStrategy", "context_parallel_size", 3) == 3
    assert check_degree("MyStrategy", "context_parallel_size", "auto") == AUTO


def test_the_runtimes_objects_implement_the_protocols_strategies_check_and_nothing_else_does() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)  # has an ``optimizer``: not a wrapper
    lite = core.Lite(accelerator="cpu", devices=1)
    _, wrapped = lite.setup(model, optimizer)
    assert isinstance(wrapped, OptimizerWrapper) and wrapped.set_up_optimizer is optimizer
    assert not isinstance(optimizer, OptimizerWrapper) and not isinstance(scheduler, OptimizerWrapper)

    class Tiny(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    module = Tiny()
    runner = StepModule(module)
    assert isinstance(runner, StepRunner) and runner.stepped_module is module
    assert not isinstance(module, StepRunner) and not isinstance(torch.nn.Linear(2, 2), StepRunner)

    group = StatefulList([optimizer], "optimizers")
    assert isinstance(group, StatefulGroup) and list(group.stateful_items) == [optimizer]
    assert not isinstance({"items": []}, StatefulGroup) and not isinstance([optimizer], StatefulGroup)
