"""DiLoCo on real gloo processes on 127.0.0.1: 4 processes (2 groups x 2) and 2 processes (2 groups x 1).

One run of scripts/diloco_job.py per layout (``strategy="ddp"``, the extension with ``replicas=2``) serves every
test here; each phase of the script is described in its docstring. What is covered: ddp inside a group (the
mesh's ``data_parallel`` dimension); fsdp and model_parallel inside a group are tested by test_diloco_sharded.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).parent / "scripts" / "diloco_job.py"
LAYOUTS = {"2x2": (4, 2), "2x1": (2, 2)}  # name -> (processes, groups)
EQUIVALENCE_TOLERANCE = 1e-6
LOSS_GAP = 0.1
"""DiLoCo (H = 4) may end at most this much above ddp's evaluation loss (nats/token) after the same tokens."""


def launch(out: Path, processes: int, groups: int) -> subprocess.CompletedProcess[str]:
    launcher = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    environment = {key: value for key, value in os.environ.items() if key not in launcher}
    environment["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(processes), str(groups)],
        capture_output=True, text=True, timeout=240, env=environment, cwd=out,
    )


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def reports(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    processes, groups = LAYOUTS[request.param]
    out = tmp_path_factory.mktemp(f"diloco-{request.param}")
    result = launch(out, processes, groups)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {rank: json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(processes)}


@pytest.mark.timeout(300)
def test_the_mesh_is_groups_of_consecutive_ranks(reports: dict[int, dict[str, Any]]) -> None:
    world = len(reports)
    inner = world // 2
    for rank, report in reports.items():
        assert report["world_size"] == world
        assert report["replica_index"] == rank // inner
        assert report["inner_ranks"] == list(range(rank // inner * inner, rank // inner * inner + inner))
        assert report["replica_ranks"] == [rank % inner, rank % inner + inner]


@pytest.mark.timeout(300)
def test_h1_with_plain_sgd_at_lr_1_is_data_parallel_training(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        equivalence = report["equivalence"]
        assert equivalence["parameters_moved"] > 0.01, f"rank {rank}: the model did not train"
        assert equivalence["max_abs_difference"] <= EQUIVALENCE_TOLERANCE, (
            f"rank {rank}: DiLoCo with H=1 ended {equivalence['max_abs_difference']:.2e} away from DDP"
        )
        # H = 1: every step sends the whole model once, as DDP does.
        assert equivalence["diloco_bytes"] == equivalence["steps"] * equivalence["parameter_bytes"]


@pytest.mark.timeout(300)
def test_h4_trains_the_gpt_within_the_loss_gap_of_ddp(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        gpt = report["gpt"]
        assert gpt["losses"][0] > 6.5, f"rank {rank}: the first loss should be about ln(1024)"
        assert gpt["evaluation"] < 2.5, f"rank {rank}: DiLoCo did not learn the bigram chain ({gpt['evaluation']})"
        gap = gpt["evaluation"] - gpt["ddp_evaluation"]
        print(f"rank {rank}: evaluation loss DiLoCo {gpt['evaluation']:.4f}, ddp {gpt['ddp_evaluation']:.4f}, "
              f"gap {gap:+.4f}")
        assert gap <= LOSS_GAP, f"rank {rank}: DiLoCo ended {gap:.3f} above ddp"
        # After the last synchronisation (48 is a multiple of H) every rank of every group holds the same model.
        assert len(set(gpt["checksums"])) == 1, gpt["checksums"]
        # Two steps after a synchronisation the ranks of a group agree (ddp inside it) and the groups do not.
        between = gpt["checksums_between_syncs"]
        inner = len(between) // 2
        assert len(set(between[:inner])) == 1 and len(set(between[inner:])) == 1, between
        assert between[0] != between[inner], between


@pytest.mark.timeout(300)
def test_bytes_between_groups_are_h_times_fewer_than_ddp(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        gpt = report["gpt"]
        # What the extension counted is what reached torch.distributed's all_reduce on the replicate group.
        assert gpt["diloco_bytes"] == gpt["counted_bytes"] > 0
        assert gpt["ddp_bytes"] == gpt["steps"] * gpt["parameter_bytes"]
        ratio = gpt["ddp_bytes"] / gpt["diloco_bytes"]
        print(f"rank {rank}: per inner step ddp {gpt['ddp_bytes'] / gpt['steps']:.0f} B, "
              f"DiLoCo {gpt['diloco_bytes'] / gpt['steps']:.0f} B ({ratio:.2f}x fewer, H = 4)")
        assert ratio >= 4


@pytest.mark.timeout(300)
def test_compression_and_streaming_bytes_and_loss(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        variants = report["variants"]
        full = variants["float32"]
        syncs = full["steps"] // 4
        parameter_bytes = report["gpt"]["parameter_bytes"]
        assert full["bytes"] == syncs * parameter_bytes
        assert variants["bf16"]["bytes"] == full["bytes"] // 2
        # int8: one byte per element plus one float32 scale per tensor.
        assert full["bytes"] / variants["int8"]["bytes"] > 3.9
        # Streaming sends each of its 2 fragments once per H steps: the same bytes, in halves.
        assert variants["streaming"]["bytes"] == full["bytes"]
        for label in ("bf16", "int8"):
            assert abs(variants[label]["evaluation"] - full["evaluation"]) < 0.05, f"rank {rank}: {label}"
        assert all(math.isfinite(loss) for variant in variants.values() for loss in variant["losses"])
        assert variants["streaming"]["evaluation"] < variants["streaming"]["losses"][0] - 1.0


@pytest.mark.timeout(300)
def test_checkpoint_resume_is_bitwise_for_inner_and_outer_state(reports: dict[int, dict[str, Any]]) -> None:
    for rank, report in reports.items():
        checkpoint = report["checkpoint"]
        assert checkpoint["in_flight_at_save"], "the save should have met a fragment in flight"
        assert checkpoint["remainder"] == {"step": 3}
        assert checkpoint["resumed_inner_steps"] == 3
        # parameters, AdamW's step/exp_avg/exp_avg_sq, the outer snapshot and the outer momentum
        assert checkpoint["tensors"] > 50 and all(checkpoint["shapes_match"])
        mismatched = [index for index, same in enumerate(checkpoint["bitwise"]) if not same]
        assert not mismatched, f"rank {rank}: tensors {mismatched} differ after resuming"
