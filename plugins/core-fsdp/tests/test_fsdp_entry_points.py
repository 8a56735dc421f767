"""fsdp across runs in the same 2 processes: Trainer entry points one after another, and what a run leaves behind.

Each entry point of the Trainer is a run of its own. The modules a run sharded come out of it still sharded (each
rank holding its shards), with the process group kept for them; the next run takes them up as they are.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fsdp_entry_points_job import Net, evaluation_sets

Job = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.distributed


def mean_loss(weights: dict[str, torch.Tensor], dataset: torch.utils.data.TensorDataset) -> float:
    """The loss over every sample of ``dataset`` with ``weights`` in a plain Net, in one process."""
    net = Net()
    net.load_state_dict(weights)
    inputs, targets = dataset.tensors
    with torch.no_grad():
        return float(F.cross_entropy(net(inputs), targets))


def assert_equal(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), name


@pytest.mark.timeout(120)
def test_fit_then_validate_test_and_fit_again_use_the_trained_weights(tmp_path: Path, job: Job) -> None:
    job("fsdp_entry_points_job.py", str(tmp_path))
    results: dict[str, Any] = torch.load(tmp_path / "results.pt", weights_only=True)
    first_fit, second_fit = results["fitted"]  # gathered from the shards inside each fit
    sets = evaluation_sets()

    # Between runs the module stays sharded (every parameter a DTensor, each rank holding part of it); gathered
    # whole by full_state_dict, it holds what the fit trained.
    for after in ("after_fit", "after_validate", "after_second_fit"):
        assert results[after]["sharded"] == {"dtensors": True, "local_elements": 90, "elements": 163}, after
    assert_equal(results["after_fit"]["state"], first_fit)
    assert_equal(results["after_validate"]["state"], first_fit)  # evaluating changes nothing
    assert_equal(results["after_second_fit"]["state"], second_fit)

    # Evaluations in later runs evaluate the trained weights: the same loss as a single process computes.
    assert results["validate"][0]["val_loss"] == pytest.approx(mean_loss(first_fit, sets["val"]), abs=1e-6)
    assert results["test"][0]["test_loss"] == pytest.approx(mean_loss(first_fit, sets["test"]), abs=1e-6)
    assert results["second_test"][0]["test_loss"] == pytest.approx(mean_loss(second_fit, sets["test"]), abs=1e-6)

    # The second fit went on from the first one's weights and trained them further.
    first_start, second_start = results["started"]
    assert_equal(second_start, first_fit)
    assert not any(torch.equal(first_fit[name], second_fit[name]) for name in first_fit)
    assert not any(torch.equal(first_start[name], first_fit[name]) for name in first_fit)


@pytest.mark.timeout(150)
def test_a_run_leaves_sharded_modules_that_compute_and_gathers_nothing_at_teardown(tmp_path: Path, job: Job) -> None:
    """After the run the modules stay sharded, as in Lightning, and the group they need lives until exit.

    Memory, per rank, exact (tensor bytes counted by core.testing.memory): the teardown allocates nothing beyond
    one gathered block (it gathers nothing: the barrier's 1-byte tensor); afterwards the module holds half of
    every tensor (the sharded footprint); full_state_dict gathers one tensor at a time (rank 1 never holds more than
    one whole tensor; rank 0 holds the state it returns). The group is destroyed by an exit handler while the
    interpreter is alive: repeated, since a group freed during interpreter shutdown aborted 1 exit in 4 from
    gloo's threads ("terminate called without an active exception")."""
    for attempt in range(3):
        out = tmp_path / str(attempt)
        out.mkdir()
        finished = job("fsdp_teardown_job.py", str(out))  # fails the test unless every process exits with 0
        assert "terminate called" not in finished.stderr, finished.stderr
        for rank in (0, 1):
            report = json.loads((out / f"report-{rank}.json").read_text())
            memory = report.pop("memory")
            assert report == {
                "group_kept": True,  # kept past the teardown for the sharded modules
                "sharded_in_halves": True,  # both modules, the one created empty included: DTensors, half each
                "classes": ["FSDPLinear", "FSDPSequential", "LayerNorm", "Tanh"],  # still fully_shard units
                "same_output": True,  # outside any run, the module computes what it computed at the end of it
                "full_state_is_trained": True,  # rank 0 gets the trained whole state, rank 1 an empty dict
                "second_run_same_output": True,  # a second run takes both up as they are, not sharded again
            }, (attempt, rank)
            whole, block = memory["whole"], memory["largest_block"]
            assert memory["local_after_teardown"] == whole // 2, memory  # the sharded footprint, nothing whole
            assert memory["teardown_peak"] <= block and memory["teardown_total"] <= block, memory
            assert memory["full_state_dict_peak"] <= (whole if rank == 0 else block), memory
