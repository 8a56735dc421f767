"""DDP is plain data parallelism: 2 ranks x batch 32 with the distributed sampler train to the same weights as
1 process x batch 64 on the same data order, and the ranks never drift apart (bitwise)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

pytestmark = [pytest.mark.distributed]

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import ddp_equivalence  # noqa: E402

if TYPE_CHECKING:  # the fixtures' types (conftest is not importable by name at run time)
    from conftest import Jobs


def check_weights(directory: Path, variant: str, ranks: tuple[int, ...] = (0, 1)) -> None:
    reference = ddp_equivalence.reference()
    states = [torch.load(directory / f"{variant}-rank{rank}.pt") for rank in ranks]
    for state in states:
        assert list(state) == list(reference)
        for name, tensor in state.items():
            assert torch.equal(tensor, states[0][name]), f"{variant}: ranks differ in {name}"
            torch.testing.assert_close(tensor, reference[name], atol=1e-6, rtol=0, msg=f"{variant}: {name}")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, jobs_in: Any) -> Path:
    """One 2-rank ``ddp`` job training both variants (the launch-style tests cover the other strategies)."""
    directory = tmp_path_factory.mktemp("equivalence")
    jobs = jobs_in(directory)
    finished = jobs.run(jobs.script("ddp_equivalence.py", "--strategy", "ddp", "--out", str(directory)), timeout=80)
    assert finished.returncode == 0, finished.output
    assert finished.leftovers == []
    return directory


@pytest.mark.timeout(90)
def test_two_ranks_of_32_train_like_one_process_of_64(trained: Path) -> None:
    check_weights(trained, "plain")


@pytest.mark.timeout(90)
def test_gradient_accumulation_with_no_backward_sync_matches_the_large_batch(trained: Path) -> None:
    check_weights(trained, "accumulate")


@pytest.mark.timeout(90)
def test_two_nodes_started_by_two_core_run_commands_train_together(jobs: Jobs, tmp_path: Path) -> None:
    from core.toolkit import find_free_port

    port = str(find_free_port())
    script = jobs.script("ddp_equivalence.py", "--devices", "1", "--num-nodes", "2", "--out", str(tmp_path))[1:]
    nodes = [
        jobs.start([sys.executable, "-m", "core.run", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "1",
                    "--num-nodes", "2", "--node-rank", str(node), "--main-address", "127.0.0.1",
                    "--main-port", port, *script])
        for node in (0, 1)
    ]
    for node in nodes:
        finished = node.finish(timeout=80)
        assert finished.returncode == 0, finished.output
        assert finished.leftovers == []
    check_weights(tmp_path, "plain")
    check_weights(tmp_path, "accumulate")
