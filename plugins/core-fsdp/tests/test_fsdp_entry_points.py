"""fsdp across runs in the same 2 processes: Trainer entry points one after another, and what a run leaves behind.

Each entry point of the Trainer is a run of its own, whose teardown destroys the process group; the modules the
run sharded must come out of it as plain modules holding the trained weights, referring to nothing of the run.
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

    # Between runs the module is a plain Net again, holding what the fit trained.
    for after in ("after_fit", "after_validate", "after_second_fit"):
        assert results[after]["differences"] == [], after
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


@pytest.mark.timeout(120)
def test_a_run_leaves_plain_modules_frees_its_process_group_and_exits_cleanly(tmp_path: Path, job: Job) -> None:
    """Before the fix, 1 run in 4 of such a script aborted at exit ("terminate called without an active exception")
    from gloo's threads, the group being kept alive by the sharded modules until interpreter shutdown; the freed
    group is what makes that impossible, the repetitions check the exit itself."""
    for attempt in range(3):
        out = tmp_path / str(attempt)
        out.mkdir()
        finished = job("fsdp_teardown_job.py", str(out))  # fails the test unless every process exits with 0
        assert "terminate called" not in finished.stderr, finished.stderr
        for rank in (0, 1):
            report = json.loads((out / f"report-{rank}.json").read_text())
            assert report == {
                "group_freed": True,  # nothing the script holds keeps the destroyed group alive
                "whole_is_plain": True,
                "whole_is_trained": True,
                "original_parameter_kept": True,  # the Parameter objects from before set-up, with trained values
                "classes": ["LayerNorm", "Linear", "Sequential", "Tanh"],  # no FSDP<Class> left
                "empty_on_meta": True,  # created empty, it leaves empty: no rank gathers the whole model
                "same_output": True,  # set up again by a second run, it computes what the plain module does
                "empty_materialised": True,
            }, (attempt, rank)
