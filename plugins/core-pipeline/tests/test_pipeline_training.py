"""``pipeline`` on 2 real processes over gloo: the small transformer cut into stages trains like the unsplit model.

Every schedule is checked against plain PyTorch on one process with the whole batch (the same reference as the
model_parallel and ddp runs of core-model-parallel's tests): every step's loss within LOSS_ATOL (measured here: at
most 4.8e-7 for GPipe, 1F1B, Interleaved1F1B and the stage function; 2.4e-7 for 2 data-parallel copies of a
one-stage pipeline). Each step's loss is the same number on both ranks (sent from the last stage).
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
TOTAL_ELEMENTS = 54464  # parameters of nd_transformer.TinyTransformer


@pytest.fixture(scope="module")
def reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    return nd.reference_losses()


def reports(directory: Path, mode: str) -> list[dict[str, Any]]:
    return [json.loads((directory / f"{mode}-report-{rank}.json").read_text()) for rank in (0, 1)]


def assert_losses_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected)
    worst = max(abs(left - right) for left, right in zip(actual, expected, strict=True))
    assert worst <= LOSS_ATOL, f"losses differ by up to {worst:.3g} (allowed {LOSS_ATOL}):\n{actual}\n{expected}"


def layers(keys: list[str]) -> list[str]:
    """The blocks (by index) and the other submodules a stage's state-dict keys name."""
    return sorted({".".join(key.split(".")[:2]) if key.startswith("layers.") else key.split(".")[0] for key in keys})


def evaluation_loss(weights: dict[str, torch.Tensor], samples: int) -> float:
    network = nd.model()
    network.load_state_dict(weights)
    tokens, targets = nd.dataset(1).tensors
    with torch.no_grad():
        return float(nd.loss_fn(network(tokens[:samples]), targets[:samples]))


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("mode", "rank0_holds", "rank1_holds"),
    [
        ("GPipe", ["embed", "layers.0", "layers.1"], ["head", "layers.2", "layers.3", "norm"]),
        ("1F1B", ["embed", "layers.0", "layers.1"], ["head", "layers.2", "layers.3", "norm"]),
        # 4 stages, stage s on rank s % 2: rank 0 runs stages 0 and 2, rank 1 stages 1 and 3.
        ("Interleaved1F1B", ["embed", "layers.0", "layers.2"], ["head", "layers.1", "layers.3", "norm"]),
        ("stage-fn", ["embed", "layers.0", "layers.1"], ["head", "layers.2", "layers.3", "norm"]),
    ],
)
def test_two_stages_train_like_the_unsplit_model(
    tmp_path: Path, job: Job, reference: Any, mode: str, rank0_holds: list[str], rank1_holds: list[str]
) -> None:
    job("pp_job.py", mode, str(tmp_path))
    rank0, rank1 = reports(tmp_path, mode)
    assert_losses_close(rank0["losses"], reference[0])
    assert rank0["losses"] == rank1["losses"] == rank0["global_losses"], "every rank reports the last stage's loss"
    # One copy of the pipeline over both ranks (Interleaved1F1B: two stages each): data_parallel outermost.
    assert rank0["mesh"] == rank1["mesh"] == {"names": ["data_parallel", "pipeline_parallel"], "shape": [1, 2],
                                              "ranks": [[0, 1]]}
    # Each rank holds its stages only, under the whole model's names.
    assert layers(rank0["keys"]) == rank0_holds and layers(rank1["keys"]) == rank1_holds
    assert rank0["elements"] + rank1["elements"] == TOTAL_ELEMENTS
    # Evaluation mode: forward only; the loss, and the last stage's output (logits), reach every rank.
    expected = evaluation_loss(reference[1], nd.GLOBAL_BATCH)
    for report in (rank0, rank1):
        assert abs(report["eval_loss"] - expected) <= LOSS_ATOL
        assert abs(report["eval_logits_loss"] - expected) <= LOSS_ATOL


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_copies_of_a_one_stage_pipeline_average_their_gradients(tmp_path: Path, job: Job, reference: Any) -> None:
    """data_parallel_size=2 x pipeline_parallel_size=1: each rank half the batch, the mean loss is the reference's."""
    job("pp_job.py", "dp2", str(tmp_path))
    rank0, rank1 = reports(tmp_path, "dp2")
    assert_losses_close(rank0["global_losses"], reference[0])
    assert rank0["global_losses"] == rank1["global_losses"]
    assert rank0["losses"] != rank1["losses"], "each copy trains on its own half of the batch"
    assert rank0["elements"] == rank1["elements"] == TOTAL_ELEMENTS
    assert rank0["mesh"] == {"names": ["data_parallel", "pipeline_parallel"], "shape": [2, 1], "ranks": [[0], [1]]}
    expected = evaluation_loss(reference[1], nd.GLOBAL_BATCH // 2)
    assert abs(rank0["eval_loss"] - expected) <= LOSS_ATOL
