"""The collectives of the DDP strategy on 2 real ranks over gloo, as Lite exposes them: all_gather shapes and
values (with gradients through sync_grads), every reduce op on floats, ints and bf16, broadcast of a dict,
barrier, rank-0-writes checkpointing and the distributed sampler's arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.distributed]


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory, jobs_in: Any) -> list[dict[str, Any]]:
    """What each of the two ranks of one ``ddp`` job saw."""
    directory = tmp_path_factory.mktemp("collectives")
    jobs = jobs_in(directory)
    finished = jobs.run(jobs.script("ddp_collectives.py", "--strategy", "ddp", "--out", str(directory)), timeout=80)
    assert finished.returncode == 0, finished.output
    assert finished.leftovers == []
    return [json.loads((directory / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.timeout(90)
def test_all_gather_stacks_every_rank_along_a_new_first_dimension(seen: list[dict[str, Any]]) -> None:
    for report in seen:
        gathers = report["gathers"]
        assert gathers["scalar"] == {"shape": [2], "values": [0, 1]}
        assert gathers["matrix"]["shape"] == [2, 2, 3]
        assert gathers["matrix"]["values"] == [[[0.0] * 3] * 2, [[1.0] * 3] * 2]
        assert gathers["nested_a"] == [[0, 10], [1, 11]]
        assert gathers["nested_b"] == [[0.0], [1.0]]


@pytest.mark.timeout(90)
def test_all_gather_with_sync_grads_sends_gradients_back_to_each_rank(seen: list[dict[str, Any]]) -> None:
    for report in seen:
        # y = gather(2 * x) on 2 ranks; d(sum of y on both ranks)/dx = 2 * world_size
        assert report["gathers"]["sync_grads"] == {"values": [[2.0], [4.0]], "grad": [4.0]}


@pytest.mark.timeout(90)
def test_each_reduce_op_on_floats_ints_and_bf16(seen: list[dict[str, Any]]) -> None:
    for report in seen:
        reductions = report["reductions"]
        assert reductions["sum"] == {"values": [[3.0, -3.0], [10.0, 1.0]], "dtype": "torch.float32"}
        assert reductions["mean"] == {"values": [[1.5, -1.5], [5.0, 0.5]], "dtype": "torch.float32"}
        assert reductions["max"] == {"values": [[2.0, -1.0], [10.0, 0.5]], "dtype": "torch.float32"}
        assert reductions["min"] == {"values": [[1.0, -2.0], [0.0, 0.5]], "dtype": "torch.float32"}
        assert reductions["int_sum"] == {"values": [3, 14], "dtype": "torch.int64"}
        assert reductions["int_mean"] == {"values": [1.5, 7.0], "dtype": "torch.float32"}  # promoted, not floored
        assert reductions["int_max"] == {"values": [2, 7], "dtype": "torch.int64"}
        assert reductions["int_min"] == {"values": [1, 7], "dtype": "torch.int64"}
        assert reductions["scalar_sum"] == 3.0
        assert reductions["number_mean"] == 1.5
        assert reductions["bf16_sum"] == {"values": [3.0]}
        assert reductions["input_untouched"] == [report["rank"] + 1.0]
        assert reductions["bad_op"] == "Unknown reduce_op='product'; expected one of ['sum', 'mean', 'max', 'min']."


@pytest.mark.timeout(90)
def test_broadcast_sends_any_picklable_object_from_the_source_rank(seen: list[dict[str, Any]]) -> None:
    for report in seen:
        assert report["broadcasts"] == {"from": 1, "tensor": [0, 2, 4], "nested": [1, {"x": "text"}], "shaped": [2]}


@pytest.mark.timeout(90)
def test_barrier_waits_for_the_slowest_rank(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["barrier_wait"] > 0.8  # rank 1 slept 1 s before reaching the barrier
    assert seen[1]["barrier_wait"] < 0.5


@pytest.mark.timeout(90)
def test_rank_zero_writes_the_checkpoint_and_every_rank_reads_it(seen: list[dict[str, Any]]) -> None:
    for report in seen:
        assert report["checkpoint"] == {"step": 7, "files": ["model.ckpt"]}  # rank 0's value, one file


@pytest.mark.timeout(90)
def test_the_sampler_splits_the_data_by_global_rank(seen: list[dict[str, Any]]) -> None:
    assert [report["sampler"] for report in seen] == [{"num_replicas": 2, "rank": 0}, {"num_replicas": 2, "rank": 1}]
    assert [report["world_size"] for report in seen] == [2, 2]
