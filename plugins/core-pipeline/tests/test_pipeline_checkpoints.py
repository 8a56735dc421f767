"""Checkpoints that reshard between the pipeline, model_parallel meshes and one process (2 real processes, gloo).

A pipeline checkpoint is written in the unsplit model's layout (module keys and optimizer numbering), so that:

- a sharded checkpoint written by model_parallel on a 2x1 mesh resumes in a 2-stage 1F1B pipeline (model and AdamW
  state), which then takes the remaining steps like the uninterrupted run;
- a 2-stage pipeline's checkpoint resumes in a 4-stage interleaved pipeline, and on a 1x2 model_parallel mesh;
- it loads strictly into the plain model and optimizer in one process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nd_transformer as nd
import pytest
import torch
from nd_jobs import Job

import core

LOSS_ATOL = 1e-5
HALF = nd.STEPS // 2


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return nd.reference_losses()[0]


@pytest.fixture(scope="module")
def pipeline_checkpoint(tmp_path_factory: pytest.TempPathFactory, job: Job) -> Path:
    """A 2-stage 1F1B run saves after HALF steps."""
    directory = tmp_path_factory.mktemp("pipeline")
    job("pp_job.py", "1F1B", str(directory))
    return directory / "1F1B-checkpoint.pt"


def report(directory: Path, mode: str, rank: int = 0) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / f"{mode}-report-{rank}.json").read_text())
    return loaded


def assert_losses_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected)
    worst = max(abs(left - right) for left, right in zip(actual, expected, strict=True))
    assert worst <= LOSS_ATOL, f"losses differ by up to {worst:.3g} (allowed {LOSS_ATOL}):\n{actual}\n{expected}"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_sharded_2x1_model_parallel_checkpoint_resumes_in_pipeline_stages(
    tmp_path: Path, job: Job, reference: list[float]
) -> None:
    job("mp_job.py", "2x1", str(tmp_path))
    job("pp_job.py", "resume-1F1B", str(tmp_path), str(tmp_path / "2x1-checkpoint"))
    for rank in (0, 1):
        resumed = report(tmp_path, "resume-1F1B", rank)
        assert resumed["loaded_step"] == HALF
        assert_losses_close(resumed["losses"], reference[HALF:])
    # The optimizer's moments came along: the resumed steps match the uninterrupted model_parallel run's.
    assert_losses_close(report(tmp_path, "resume-1F1B")["losses"], report(tmp_path, "2x1")["losses"][HALF:])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_pipeline_checkpoint_resumes_on_another_split_and_on_a_model_parallel_mesh(
    tmp_path: Path, job: Job, pipeline_checkpoint: Path, reference: list[float]
) -> None:
    job("pp_job.py", "resume-Interleaved1F1B", str(tmp_path), str(pipeline_checkpoint))
    assert_losses_close(report(tmp_path, "resume-Interleaved1F1B")["losses"], reference[HALF:])
    job("mp_job.py", "resume-1x2", str(tmp_path), str(pipeline_checkpoint))
    resumed = report(tmp_path, "resume-1x2")
    assert resumed["loaded_step"] == HALF
    assert_losses_close(resumed["losses"], reference[HALF:])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_pipeline_checkpoint_loads_strictly_into_the_plain_model_in_one_process(
    pipeline_checkpoint: Path, reference: list[float]
) -> None:
    def load(lite: core.Lite) -> tuple[float, int]:
        network = nd.model()
        model, optimizer = lite.setup(network, nd.optimizer(network.parameters()))
        remainder = lite.load(pipeline_checkpoint, {"model": model, "optimizer": optimizer}, strict=True)
        # One more step from the loaded state: the loss of step HALF of the uninterrupted run.
        tokens, targets = nd.dataset().tensors
        batch = slice(HALF * nd.GLOBAL_BATCH, (HALF + 1) * nd.GLOBAL_BATCH)
        with torch.no_grad():
            loss = nd.loss_fn(model(tokens[batch]), targets[batch])
        return float(loss), remainder["step"]

    checkpoint = torch.load(pipeline_checkpoint, weights_only=True)
    assert list(checkpoint["model"]) == list(nd.model().state_dict()), "the unsplit model's keys, in its order"
    groups = checkpoint["optimizer"]["param_groups"]
    assert [group["params"] for group in groups] == [list(range(len(list(nd.model().parameters()))))]
    loaded = core.Lite(accelerator="cpu", devices=1).launch(load)
    assert loaded is not None  # one process: rank 0's result
    loss, step = loaded
    assert step == HALF
    assert abs(loss - reference[HALF]) <= LOSS_ATOL
