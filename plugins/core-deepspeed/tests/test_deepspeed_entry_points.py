"""DeepSpeed across runs in the same 2 processes: Trainer entry points one after another.

Each entry point of the Trainer is a run of its own, whose teardown destroys the process group: the module must
come out of each run as a plain module holding the trained weights, and DeepSpeed must not hand the next run the
groups of the destroyed one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
from deepspeed_entry_points_job import Net, evaluation_sets  # noqa: E402

Command = Callable[..., subprocess.CompletedProcess[str]]


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


@pytest.mark.timeout(150)
@pytest.mark.parametrize("strategy", ["deepspeed_stage_2", "deepspeed_stage_3"])
def test_fit_then_validate_test_and_fit_again_use_the_trained_weights(
    strategy: str, tmp_path: Path, command: Command
) -> None:
    script = SCRIPTS / "deepspeed_entry_points_job.py"
    finished = command([sys.executable, str(script), strategy, str(tmp_path)], cwd=tmp_path, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    results: dict[str, Any] = torch.load(tmp_path / "results.pt", weights_only=True)
    first_fit, second_fit = results["fitted"]  # gathered (from the partitions under stage 3) inside each fit
    sets = evaluation_sets()

    # Between runs the module is a plain Net again (no partitions, hooks or DeepSpeed attributes left), trained.
    for after in ("after_fit", "after_validate", "after_second_fit"):
        assert results[after]["differences"] == [], after
    assert_equal(results["after_fit"]["state"], first_fit)
    assert_equal(results["after_validate"]["state"], first_fit)
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

    if strategy == "deepspeed_stage_3":
        # A module created already partitioned belongs to its run: a later run refuses it, saying what to do.
        assert results["later_run"].startswith(
            "The strategy 'deepspeed_stage_3' cannot set up this module: its parameters ['net.0.weight', "
            "'net.0.bias', 'net.2.weight'] ... were partitioned by ZeRO-3 over the processes of an earlier run"
        )
        assert results["later_run"].endswith(
            "Create the module inside this run's init_module() and load its weights from a checkpoint."
        )



@pytest.fixture(scope="module", params=["deepspeed_stage_2", "deepspeed_stage_3"])
def saved_after_fit(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, command: Command) -> Path:
    """One job per stage: a straight 6-step fit; a 3-step fit, then save_checkpoint twice; a resume to 6 steps."""
    directory = tmp_path_factory.mktemp(request.param)
    script = SCRIPTS / "deepspeed_save_after_fit_job.py"
    finished = command([sys.executable, str(script), request.param, str(directory)], cwd=directory, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return directory


@pytest.mark.timeout(150)
def test_save_checkpoint_after_fit_writes_deepspeed_shards_that_resume_bitwise(saved_after_fit: Path) -> None:
    """The fit's engine is gone when save_checkpoint runs: the save sets the Module's optimizer up again and the
    strategy carries the ZeRO state the fit ended with into the new engine (before: "setup_optimizers() takes
    torch.optim.Optimizer objects, got DeepSpeedZeroOptimizer"). The Trainer's checkpoint goes through the engine,
    one optimizer shard per rank, as Lite.save of an engine does."""
    for name in ("first", "second"):  # the second in a run after the first's, which gave the optimizer back again
        shards = sorted(path.name for path in (saved_after_fit / name / "checkpoint").iterdir())
        optimizer_shards = [shard for shard in shards if shard.endswith("_optim_states.pt")]
        assert optimizer_shards == [f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)], name
    results = torch.load(saved_after_fit / "results.pt", weights_only=True)
    assert len(results["straight_losses"]) == 6
    assert results["resumed_losses"] == results["straight_losses"][3:]  # Adam's state too: a fresh one would differ
    assert_equal(results["resumed"], results["straight"])
    assert not any(torch.equal(results["stopped"][key], results["straight"][key]) for key in results["straight"])
    # Consolidated, the checkpoint's weights are the Module's own (its keys, not its StepModule's "module.<key>").
    assert_equal(results["consolidated"], results["stopped"])
