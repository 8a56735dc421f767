"""The Trainer drives the pipeline: a Module cut into 2 stages on 2 real processes trains like one process.

The same Module runs in both layouts (``forward(tokens, target=None)`` returns the loss when given targets, so the
training step's ``self(tokens, target=targets)`` is the pipeline's whole step, or a plain forward and loss). A
pipeline has one data-parallel copy here, so both processes read the batches one process reads: every training
step's loss, every epoch's validation loss and the final weights must match one process, also across a switch of
layout at a resume (the checkpoint is in the unsplit model's layout, saved by global rank 0). Tolerances as in
test_pipeline_training (measured there: losses within 4.8e-7).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nd_transformer as nd
import pytest
import torch
from nd_jobs import Job

LOSS_ATOL = 1e-5
WEIGHT_ATOL = 1e-4
EPOCH_STEPS = nd.STEPS // 2  # the script trains on half the dataset per epoch


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, job: Job) -> Path:
    """4 epochs on one process, and 2 + 2 epochs switching between a pipeline and one process either way."""
    out = tmp_path_factory.mktemp("pipeline-trainer")
    job("pp_trainer.py", "one", str(out), "straight", "4")
    # The refused validate() after this fit may end the job with rank 1's error (exit 1) or be caught by rank 0's
    # script (exit 0), whichever reaches the launcher first: the last test reads the message from either.
    refused = job("pp_trainer.py", "1F1B", str(out), "1f1b-first", "2", check=False)
    (out / "1f1b-first-job.txt").write_text(f"{refused.returncode}\n{refused.stdout}\n{refused.stderr}")
    assert (out / "1f1b-first-report.json").exists(), refused.stdout + refused.stderr
    job("pp_trainer.py", "one", str(out), "1f1b-then-one", "4", str(out / "1f1b-first" / "last.ckpt"))
    job("pp_trainer.py", "one", str(out), "one-first", "2")
    job("pp_trainer.py", "GPipe", str(out), "one-then-gpipe", "4", str(out / "one-first" / "last.ckpt"))
    return out


def report(out: Path, tag: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((out / f"{tag}-report.json").read_text())
    found["losses"] = {step: loss for step, loss in found["losses"]}
    return found


def assert_same_weights(out: Path, tag: str) -> None:
    got = torch.load(out / tag / "last.ckpt", weights_only=True)["state_dict"]
    expected = torch.load(out / "straight" / "last.ckpt", weights_only=True)["state_dict"]
    assert list(got) == list(expected)  # the unsplit Module's keys, in its order
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=WEIGHT_ATOL, rtol=0, msg=name)


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_trainer_pipeline_run_trains_like_one_process_and_resumes_on_one_process(runs: Path) -> None:
    straight, first, resumed = report(runs, "straight"), report(runs, "1f1b-first"), report(runs, "1f1b-then-one")
    assert sorted(straight["losses"]) == list(range(4 * EPOCH_STEPS))
    assert sorted(first["losses"]) == list(range(2 * EPOCH_STEPS))
    assert sorted(resumed["losses"]) == list(range(2 * EPOCH_STEPS, 4 * EPOCH_STEPS))
    for step, loss in {**first["losses"], **resumed["losses"]}.items():
        assert loss == pytest.approx(straight["losses"][step], abs=LOSS_ATOL), step
    assert straight["losses"][4 * EPOCH_STEPS - 1] < straight["losses"][0] / 2  # it learns
    # Validation ran through the pipeline's forward-only schedule with the loss, once per epoch.
    assert first["validation"] + resumed["validation"] == pytest.approx(straight["validation"], abs=LOSS_ATOL)
    # Rank 0 held the first stage only (cut at net.layers.2) ...
    assert sorted({".".join(key.split(".")[:3]) for key in first["holds"]}) == [
        "net.embed.weight", "net.layers.0", "net.layers.1"]
    # ... and its last.ckpt holds the whole Module: one process resumed from it as if never stopped.
    assert_same_weights(runs, "1f1b-then-one")


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_one_process_trainer_checkpoint_resumes_in_a_pipeline_as_if_never_stopped(runs: Path) -> None:
    straight, resumed = report(runs, "straight"), report(runs, "one-then-gpipe")
    assert sorted(resumed["losses"]) == list(range(2 * EPOCH_STEPS, 4 * EPOCH_STEPS))
    for step, loss in resumed["losses"].items():
        assert loss == pytest.approx(straight["losses"][step], abs=LOSS_ATOL), step
    assert resumed["validation"] == pytest.approx(straight["validation"][2:], abs=LOSS_ATOL)
    assert_same_weights(runs, "one-then-gpipe")


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_module_cut_by_a_pipeline_run_is_not_set_up_again(runs: Path) -> None:
    # After fit each rank's Module holds its stage only: validate(module) says so and what to do, nothing hangs
    # (the job ended within the fixture's timeout). The message is rank 0's caught error, or rank 1's in the
    # launcher's report of the stopped job.
    caught = runs / "1f1b-first-again.json"
    returncode, output = (runs / "1f1b-first-job.txt").read_text().split("\n", 1)
    if caught.exists():
        kind, message = json.loads(caught.read_text())
        assert returncode == "0", output
    else:
        assert returncode == "1" and "core-pipeline: traceback of global rank 1:" in output, output
        kind, message = "ConfigurationError", output.split("ConfigurationError: ", 1)[-1]
        assert "core._errors.ConfigurationError: This Language was cut" in output, output
    assert kind == "ConfigurationError"
    assert "was cut into pipeline stages by an earlier set-up in this process" in message
    assert "trainer.test(NewModule(), ckpt_path=...)" in message
