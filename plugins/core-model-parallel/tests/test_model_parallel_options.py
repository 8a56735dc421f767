"""``model_parallel`` options and declared incompatibilities, checked before (or without) any second process."""

from __future__ import annotations

from pathlib import Path

import pytest
from core_model_parallel import ModelParallelStrategy
from nd_jobs import Job

import core
from core.toolkit.strategies import DATA_PARALLEL, TENSOR_PARALLEL, ParallelDims, fit_degrees


def shape(data_parallel: object, tensor_parallel: object, devices: int, nodes: int) -> ParallelDims:
    return fit_degrees("ModelParallelStrategy", (DATA_PARALLEL, data_parallel),  # type: ignore[arg-type]
                       (TENSOR_PARALLEL, tensor_parallel), devices, nodes)  # type: ignore[arg-type]


def test_auto_puts_tensor_parallel_within_a_node_and_data_parallel_across_nodes() -> None:
    assert shape("auto", "auto", 2, 1).sizes == (1, 2)
    assert shape("auto", "auto", 4, 2).sizes == (2, 4)
    assert shape("auto", "auto", 4, 2).names == ("data_parallel", "tensor_parallel")
    # One size given: the other is what it leaves of the world size.
    assert shape(2, "auto", 2, 1).sizes == (2, 1)
    assert shape("auto", 4, 4, 2).sizes == (2, 4)
    assert str(shape(2, 1, 2, 1)) == "data_parallel=2 x tensor_parallel=1"


def test_sizes_that_do_not_multiply_to_the_world_size_print_every_factor_and_the_sizes_that_fit() -> None:
    with pytest.raises(core.ConfigurationError) as raised:
        shape(2, 2, 2, 1)
    message = str(raised.value)
    assert "data_parallel_size (2) x tensor_parallel_size (2) = 4" in message
    assert "world size 2 (devices=2 per node x num_nodes=1)" in message
    assert "data_parallel_size=1, tensor_parallel_size=2; data_parallel_size=2, tensor_parallel_size=1" in message
    with pytest.raises(core.ConfigurationError, match=r"tensor_parallel_size=3\) does not divide the world size 4"):
        shape("auto", 3, 2, 2)


def test_a_mismatch_fails_when_the_lite_is_made_before_any_process_starts() -> None:
    with pytest.raises(core.ConfigurationError, match=r"data_parallel_size \(4\) x tensor_parallel_size \(1\) = 4"):
        core.Lite(accelerator="cpu", strategy=ModelParallelStrategy(data_parallel_size=4, tensor_parallel_size=1),
                  devices=2)


@pytest.mark.parametrize("value", [0, -1, "two", True, 1.5])
def test_a_size_must_be_a_positive_int_or_auto(value: object) -> None:
    with pytest.raises(core.ConfigurationError, match=rf"tensor_parallel_size={value!r}\): expected a positive"):
        ModelParallelStrategy(tensor_parallel_size=value)  # type: ignore[arg-type]


def test_parallelize_fn_must_be_callable() -> None:
    with pytest.raises(core.ConfigurationError, match="expected a function"):
        ModelParallelStrategy(parallelize_fn="tp")  # type: ignore[arg-type]


def test_the_alias_resolves_with_sharded_checkpoints_by_default() -> None:
    info = core.discover().lookup("strategy", "model_parallel")
    assert info.distribution == "core-model-parallel" and info.requires_core
    lite = core.Lite(accelerator="cpu", strategy="model_parallel", devices=2)
    assert isinstance(lite.strategy, ModelParallelStrategy)
    assert lite.active.config.checkpoint_io == "distributed"
    assert lite.strategy.mesh_shape.sizes == (1, 2)
    full = core.Lite(accelerator="cpu", strategy=ModelParallelStrategy(save_distributed_checkpoint=False), devices=2)
    assert full.active.config.checkpoint_io == "torch"


def test_declared_incompatibilities_name_the_way_out() -> None:
    with pytest.raises(core.ConfigurationError, match=r"precision .16-mixed.*use precision=.bf16-mixed."):
        core.Lite(accelerator="cpu", strategy="model_parallel", devices=2, precision="16-mixed")
    refused = r"checkpoint_io .torch.*ModelParallelStrategy\(save_distributed_checkpoint=False\)"
    with pytest.raises(core.ConfigurationError, match=refused):
        core.Lite(accelerator="cpu", strategy="model_parallel", devices=2, plugins=["torch"])


def test_the_device_mesh_exists_only_inside_a_run() -> None:
    strategy = ModelParallelStrategy()
    with pytest.raises(core.ConfigurationError, match=r"lite\.device_mesh"):
        _ = strategy.device_mesh


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_plain_module_without_a_parallelize_function_is_refused_with_the_ways_to_pass_one(
    tmp_path: Path, job: Job
) -> None:
    # In its own process: a run of the ddp family exports the rank variables into the process that launches it.
    finished = job("mp_job.py", "no-parallelize", str(tmp_path), check=False)
    assert finished.returncode != 0
    message = finished.stderr
    assert "ConfigurationError" in message and "no parallelize function" in message
    assert "parallelize_fn=fn" in message and "configure_model" in message and "strategy='fsdp'" in message


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_data_parallelism_without_fully_shard_is_refused(tmp_path: Path, job: Job) -> None:
    finished = job("mp_job.py", "2x1-no-fully-shard", str(tmp_path), check=False)
    assert finished.returncode != 0
    assert "data_parallel_size=2, but the parallelized module has no fully_shard unit" in finished.stderr
    assert "fully_shard(module, mesh=device_mesh['data_parallel'])" in finished.stderr
