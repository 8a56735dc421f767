"""``model_parallel`` on 2 real processes over gloo: the small transformer trains like one process and like ddp
on a 1x2 and a 2x1 mesh, and a checkpoint written on one mesh resumes on the other, or loads into one process.

Tolerances: every step's loss within LOSS_ATOL of plain PyTorch on one process with the whole batch (measured here:
2.4e-7 for both meshes and for ddp), the trained weights within WEIGHT_ATOL (measured: 1.5e-5 on 1x2, 5.2e-6 on 2x1
and ddp; AdamW divides by the root of tiny second moments, which magnifies float reordering in a few entries).
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
WEIGHT_ATOL = 1e-4
TOTAL_ELEMENTS = 54464  # parameters of nd_transformer.TinyTransformer
HALF = nd.STEPS // 2


@pytest.fixture(scope="module")
def reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    return nd.reference_losses()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for every job of this module: later jobs read the checkpoints earlier ones wrote."""
    return tmp_path_factory.mktemp("model-parallel")


def reports(directory: Path, mode: str) -> list[dict[str, Any]]:
    return [json.loads((directory / f"{mode}-report-{rank}.json").read_text()) for rank in (0, 1)]


def weights(directory: Path, mode: str) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(directory / f"{mode}-weights.pt", weights_only=True)
    return loaded


def assert_losses_close(actual: list[float], expected: list[float], atol: float = LOSS_ATOL) -> None:
    assert len(actual) == len(expected)
    worst = max(abs(left - right) for left, right in zip(actual, expected, strict=True))
    assert worst <= atol, f"losses differ by up to {worst:.3g} (allowed {atol}):\n{actual}\n{expected}"


def assert_weights_close(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=WEIGHT_ATOL, msg=name)


def check_training(directory: Path, mode: str, reference: tuple[list[float], dict[str, torch.Tensor]],
                   mesh: list[int], local_elements: int) -> None:
    losses, trained = reference
    rank0, rank1 = reports(directory, mode)
    assert_losses_close(rank0["losses"], losses)
    assert rank0["losses"] == rank1["losses"], "the ranks reported different global losses"
    assert losses[-1] < 0.3 * losses[0], "the reference itself did not learn: the comparison would prove little"
    assert_weights_close(weights(directory, mode), trained)
    for rank, report in enumerate((rank0, rank1)):
        assert report["mesh"] == {"names": ["data_parallel", "tensor_parallel"], "shape": mesh}
        assert report["local_elements"] == local_elements
        data_parallel = mesh[0]
        assert report["sampler"] == {"num_replicas": data_parallel, "rank": rank if data_parallel == 2 else 0}
    for rank in (0, 1):  # launch() returned: the module is still parallelized, holding this rank's part only
        after = json.loads((directory / f"{mode}-after-{rank}.json").read_text())
        memory = after.pop("memory")
        assert after == {"parallelized": True, "local_elements": local_elements, "local_bytes": 4 * local_elements}
        # Tensor bytes counted exactly (core.testing.memory): the teardown gathers nothing (the barrier's 1-byte
        # tensor); full_state_dict gathers one tensor at a time, so rank 1 holds at most one whole tensor, two
        # momentarily for a row-wise weight (sharded on dim 1, gathered along dim 0 then reordered); rank 0 keeps
        # the state it returns.
        block = memory["largest_block"]
        assert memory["teardown_peak"] <= block, memory
        assert memory["full_state_dict_peak"] <= (memory["whole"] if rank == 0 else 2 * block), memory


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_tensor_parallel_1x2_trains_like_one_process_and_ddp(runs: Path, job: Job, reference: Any) -> None:
    job("mp_job.py", "1x2", str(runs))
    job("mp_job.py", "ddp", str(runs))
    # Each rank holds half of every projection (tensor parallel); embeddings, norms and biases of row-wise layers
    # are whole on both.
    check_training(runs, "1x2", reference, mesh=[1, 2], local_elements=29632)
    assert_losses_close(reports(runs, "1x2")[0]["losses"], reports(runs, "ddp")[0]["losses"])
    assert_weights_close(weights(runs, "ddp"), reference[1])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_data_parallel_2x1_trains_like_one_process_with_every_parameter_sharded(
    runs: Path, job: Job, reference: Any
) -> None:
    job("mp_job.py", "2x1", str(runs))
    check_training(runs, "2x1", reference, mesh=[2, 1], local_elements=TOTAL_ELEMENTS // 2)
    files = sorted(path.name for path in (runs / "2x1-checkpoint").iterdir())
    assert files == [".checksums", ".metadata", "__0_0.distcp", "__1_0.distcp"], "every rank wrote its own shards"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_2x1_checkpoint_resumes_on_a_1x2_mesh_and_the_reverse(runs: Path, job: Job, reference: Any) -> None:
    for written, resumed in (("2x1", "resume-1x2"), ("1x2", "resume-2x1")):
        if not (runs / f"{written}-checkpoint").exists():
            job("mp_job.py", written, str(runs))
        job("mp_job.py", resumed, str(runs), str(runs / f"{written}-checkpoint"))
        rank0, rank1 = reports(runs, resumed)
        assert rank0["loaded_step"] == HALF
        assert rank0["loaded_weights"] == rank1["loaded_weights"]
        # The resumed run takes the remaining steps of the uninterrupted one, on the other mesh.
        assert_losses_close(rank0["losses"], reports(runs, written)[0]["losses"][HALF:])
        assert_losses_close(rank0["losses"], reference[0][HALF:])
        assert_weights_close(weights(runs, resumed), reference[1])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_sharded_and_full_checkpoints_load_into_one_process(runs: Path, job: Job, reference: Any) -> None:
    if not (runs / "2x1-checkpoint").exists():
        job("mp_job.py", "2x1", str(runs))
    job("mp_job.py", "2x1-full", str(runs))
    assert (runs / "2x1-full-checkpoint.pt").is_file(), "save_distributed_checkpoint=False writes one file"

    def load(lite: core.Lite, path: Path) -> tuple[dict[str, torch.Tensor], int]:
        network = lite.setup(nd.model())
        remainder = lite.load(path, {"model": network}, strict=False)
        return {name: value.detach().clone() for name, value in network.state_dict().items()}, remainder["step"]

    # A plain module in one process: the shards come back as whole tensors.
    alone = core.Lite(accelerator="cpu", devices=1, plugins=["distributed"])
    loaded_sharded = alone.launch(load, runs / "2x1-checkpoint")
    loaded_full = core.Lite(accelerator="cpu", devices=1).launch(load, runs / "2x1-full-checkpoint.pt")
    assert loaded_sharded is not None and loaded_full is not None  # one process: rank 0's results
    (sharded, step), (full, _) = loaded_sharded, loaded_full
    assert step == HALF
    assert sharded.keys() == full.keys() == reference[1].keys()
    for name in sharded:
        assert torch.equal(sharded[name], full[name]), name
    # The model_parallel strategy itself on one process (a 1x1 mesh) resumes from it, into DTensor parameters, and
    # takes the remaining steps like the uninterrupted run.
    job("mp_job.py", "resume-1x1", str(runs), str(runs / "2x1-checkpoint"))
    resumed = json.loads((runs / "resume-1x1-report-0.json").read_text())
    for name in sharded:
        assert torch.equal(torch.tensor(resumed["loaded_weights"][name]), sharded[name]), name
    assert_losses_close(resumed["losses"], reference[0][HALF:])
    # What the resumed 1x2 run loaded is that same state.
    if (runs / "resume-1x2-report-0.json").exists():
        loaded = reports(runs, "resume-1x2")[0]["loaded_weights"]
        for name in sharded:
            assert torch.equal(torch.tensor(loaded[name]), sharded[name]), name
