"""A Trainer run of ``model_parallel`` on 2 processes resumes on 1 process, and the reverse (real gloo processes).

The Module parallelizes itself in ``configure_model`` with ``self.device_mesh`` (``None`` on one process, where it
leaves the model alone), so one Module runs in both layouts. 1x2 (tensor parallel) has one data-parallel replica,
like one process: both read the same batches, so every step after the switch must match an uninterrupted run on
one process. Tolerances as in test_model_parallel_training (measured there: losses 2.4e-7, weights 1.5e-5 on 1x2).
"""

from __future__ import annotations

import json
from pathlib import Path

import nd_transformer as nd
import pytest
import torch
from nd_jobs import Job

LOSS_ATOL = 1e-5
WEIGHT_ATOL = 1e-4
EPOCH_STEPS = nd.STEPS // 2  # the script trains on half the dataset per epoch


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, job: Job) -> Path:
    """Every run of the module: 4 epochs on one process, and 2 + 2 epochs with the layout switched either way."""
    out = tmp_path_factory.mktemp("model-parallel-trainer")
    job("mp_trainer.py", "one", str(out), "straight", "4")
    job("mp_trainer.py", "1x2", str(out), "tp-first", "2")
    job("mp_trainer.py", "one", str(out), "tp-then-one", "4", str(out / "tp-first" / "last.ckpt"))
    job("mp_trainer.py", "one", str(out), "one-first", "2")
    job("mp_trainer.py", "1x2", str(out), "one-then-tp", "4", str(out / "one-first" / "last.ckpt"))
    return out


def losses(out: Path, tag: str) -> dict[int, float]:
    return {step: loss for step, loss in json.loads((out / f"{tag}-losses.json").read_text())}


def assert_same_weights(out: Path, tag: str, reference: str) -> None:
    got = torch.load(out / f"{tag}-weights.pt", weights_only=True)
    expected = torch.load(out / f"{reference}-weights.pt", weights_only=True)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=WEIGHT_ATOL, rtol=0, msg=name)


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_sharded_1x2_trainer_checkpoint_resumes_on_one_process_as_if_never_stopped(runs: Path) -> None:
    assert (runs / "tp-first" / "last.ckpt").is_dir()  # sharded: every rank wrote its part
    straight, first, resumed = losses(runs, "straight"), losses(runs, "tp-first"), losses(runs, "tp-then-one")
    assert sorted(straight) == list(range(4 * EPOCH_STEPS))
    assert sorted(first) == list(range(2 * EPOCH_STEPS))  # the Trainer on the 1x2 mesh trains like one process
    assert sorted(resumed) == list(range(2 * EPOCH_STEPS, 4 * EPOCH_STEPS))  # from the step after the checkpoint
    for step, loss in {**first, **resumed}.items():
        assert loss == pytest.approx(straight[step], abs=LOSS_ATOL), step
    assert straight[4 * EPOCH_STEPS - 1] < straight[0] / 2  # it learns
    assert_same_weights(runs, "tp-then-one", "straight")


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_one_process_trainer_checkpoint_resumes_on_a_1x2_mesh_as_if_never_stopped(runs: Path) -> None:
    assert (runs / "one-first" / "last.ckpt").is_file()
    straight, resumed = losses(runs, "straight"), losses(runs, "one-then-tp")
    assert sorted(resumed) == list(range(2 * EPOCH_STEPS, 4 * EPOCH_STEPS))
    for step, loss in resumed.items():
        assert loss == pytest.approx(straight[step], abs=LOSS_ATOL), step
    assert_same_weights(runs, "one-then-tp", "straight")
