"""DiLoCo with fsdp and model_parallel inside each group, on 4 real gloo processes on 127.0.0.1 (2 groups x 2).

One run of scripts/diloco_sharded_job.py per layout serves every test of that layout (the phases are described in
its docstring): ``fsdp`` (each parameter sharded over the group's 2 ranks, sharded checkpoints through core-dcp),
``fsdp-full`` (the same, checkpoint gathered into one file by rank 0: the checkpoint phase only) and
``model_parallel`` (tensor parallelism over the group's 2 ranks, sharded checkpoints).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).parent / "scripts" / "diloco_sharded_job.py"
WORLD = 4
EQUIVALENCE_TOLERANCE = 1e-6


def launch(out: Path, layout: str) -> subprocess.CompletedProcess[str]:
    launcher = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    environment = {key: value for key, value in os.environ.items() if key not in launcher}
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), layout],
        capture_output=True, text=True, timeout=240, env=environment, cwd=out,
    )


def run_layout(layout: str, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    out = tmp_path_factory.mktemp(f"diloco-{layout}")
    result = launch(out, layout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {rank: json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(WORLD)}


@pytest.fixture(scope="module", params=["fsdp", "model_parallel"])
def reports(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    return run_layout(request.param, tmp_path_factory)


@pytest.mark.timeout(300)
def test_the_strategy_shards_within_its_group_only(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        layout = report["layout"]
        group = rank // 2
        assert layout["replica_index"] == group
        assert layout["inner_ranks"] == [2 * group, 2 * group + 1]
        assert layout["replica_ranks"] == [rank % 2, rank % 2 + 2]
        # Every parameter (model_parallel: those tensor parallelism split) is a DTensor over the group's ranks only.
        assert layout["dtensor_parameters"] == layout["parameters"]
        assert layout["parameter_meshes"] == [[2 * group, 2 * group + 1]], layout["parameter_meshes"]


@pytest.mark.timeout(300)
def test_the_extension_and_the_strategy_share_one_mesh_with_replicate_outermost(
    reports: dict[int, dict[str, Any]],
) -> None:
    for report in reports.values():
        layout = report["layout"]
        assert layout["extension_reads_the_strategys_mesh"] is True
        if layout["mesh_names"] == ["replicate", "data_parallel"]:  # fsdp: each group shards over its 2 ranks
            assert layout["mesh_shape"] == [2, 2] and layout["mesh_ranks"] == [[0, 1], [2, 3]]
            assert layout["device_mesh_names"] is None  # lite.device_mesh stays model_parallel's and pipeline's
        else:  # model_parallel: each group is one replica (data_parallel=1) in two tensor-parallel halves
            assert layout["mesh_names"] == ["replicate", "data_parallel", "tensor_parallel"]
            assert layout["mesh_shape"] == [2, 1, 2] and layout["mesh_ranks"] == [[[0, 1]], [[2, 3]]]
            assert layout["device_mesh_names"] == ["data_parallel", "tensor_parallel"]  # the group's, as before


@pytest.mark.timeout(300)
def test_the_samplers_give_every_group_its_own_data(reports: dict[int, dict[str, Any]]) -> None:
    splits = {rank: report["layout"]["sampler"] for rank, report in reports.items()}
    if all(split["num_replicas"] == WORLD for split in splits.values()):  # fsdp: every rank its own part
        assert sorted(split["rank"] for split in splits.values()) == list(range(WORLD))
    else:  # model_parallel, tensor parallel inside a group: one part per group, the group's ranks share it
        assert {split["num_replicas"] for split in splits.values()} == {2}
        assert [splits[rank]["rank"] for rank in range(WORLD)] == [0, 0, 1, 1]


@pytest.mark.timeout(300)
def test_h1_with_plain_sgd_at_lr_1_is_data_parallel_training(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        equivalence = report["equivalence"]
        assert equivalence["parameters_moved"] > 0.01, f"rank {rank}: the model did not train"
        assert equivalence["max_abs_difference"] <= EQUIVALENCE_TOLERANCE, (
            f"rank {rank}: DiLoCo with H=1 ended {equivalence['max_abs_difference']:.2e} away from DDP"
        )
        # Each rank sends only its shard of the model to its counterpart in the other group, once per step.
        assert equivalence["local_parameter_bytes"] < equivalence["whole_parameter_bytes"]
        assert equivalence["diloco_bytes"] == equivalence["steps"] * equivalence["local_parameter_bytes"]


@pytest.mark.timeout(300)
def test_bytes_between_groups_are_h_times_fewer_than_ddp(reports: dict[int, dict[str, Any]]) -> None:
    group_bytes: dict[int, int] = {}
    for rank, report in reports.items():
        traffic = report["traffic"]
        syncs = traffic["steps"] // 4
        assert traffic["diloco_bytes"] == syncs * traffic["local_parameter_bytes"]
        group_bytes[rank // 2] = group_bytes.get(rank // 2, 0) + traffic["diloco_bytes"]
        losses = traffic["losses"]
        assert losses[-1] < 0.8 * losses[0], f"rank {rank}: the loss did not fall ({losses[0]} -> {losses[-1]})"
    # Across its ranks a group sends the whole model once per synchronisation; ddp over all ranks all-reduces the
    # whole model from every rank at every step: H = 4 times fewer per rank, and more for the group's slices.
    whole = reports[0]["traffic"]["whole_parameter_bytes"]
    steps = reports[0]["traffic"]["steps"]
    for group, sent in group_bytes.items():
        # model_parallel: column- and row-wise halves of the two linear layers, their biases split or replicated
        assert sent >= steps // 4 * whole, (group, sent)
        ddp_per_group = 2 * steps * whole
        assert ddp_per_group / sent >= 4, (group, sent, ddp_per_group)


def _check_resume(reports: dict[int, dict[str, Any]], files: set[str]) -> None:
    for rank, report in reports.items():
        checkpoint = report["checkpoint"]
        assert checkpoint["in_flight_at_save"], "the save should have met a fragment in flight"
        assert checkpoint["remainder"] == {"step": 3}
        assert checkpoint["resumed_inner_steps"] == 3
        # parameters, AdamW's step/exp_avg/exp_avg_sq, the outer snapshot and the outer momentum: this rank's shards
        assert checkpoint["tensors"] >= 4 * 4
        mismatched = [index for index, same in enumerate(checkpoint["bitwise"]) if not same]
        assert not mismatched, f"rank {rank}: tensors {mismatched} differ after resuming"
        assert files <= set(checkpoint["files"]), checkpoint["files"]
    # The groups held different models at the save: a checkpoint of one group's state would not resume the other.
    assert reports[0]["checkpoint"]["sum_at_save"] != reports[2]["checkpoint"]["sum_at_save"]


@pytest.mark.timeout(300)
def test_sharded_checkpoint_resume_is_bitwise_for_every_group(reports: dict[int, dict[str, Any]]) -> None:
    # Every rank wrote its own shards (4 .distcp files); group 1's state rides under "diloco_groups".
    _check_resume(reports, {".metadata", *(f"__{rank}_0.distcp" for rank in range(WORLD))})


@pytest.mark.timeout(300)
def test_gathered_checkpoint_resume_is_bitwise_for_every_group(tmp_path_factory: pytest.TempPathFactory) -> None:
    _check_resume(run_layout("fsdp-full", tmp_path_factory), {"diloco.ckpt"})
