"""DeepSpeed ZeRO on 2 real processes over gloo on the CPU: it trains like ddp, shards what it says it shards,
and its checkpoints resume bitwise and consolidate into a plain module.

DeepSpeed takes seconds to import in every process, so each job below runs several checks, and the jobs are
module-scoped fixtures shared by the tests that read their results.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import deepspeed_job  # noqa: E402

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.py"
RANKS = (0, 1)


def results(directory: Path, mode: str) -> list[dict[str, Any]]:
    return [torch.load(directory / f"{mode}-rank{rank}.pt", weights_only=False) for rank in RANKS]


@pytest.fixture(scope="module")
def ddp_weights(tmp_path_factory: pytest.TempPathFactory, ds_job: Callable[..., None]) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("ddp")
    ds_job("equivalence", "ddp", directory)
    return results(directory, "equivalence")[0]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("strategy", ["deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_2_offload"])
def test_twenty_sgd_steps_give_the_weights_of_ddp(
    strategy: str, ddp_weights: dict[str, Any], tmp_path: Path, ds_job: Callable[..., None]
) -> None:
    ds_job("equivalence", strategy, tmp_path)

    for rank, result in zip(RANKS, results(tmp_path, "equivalence"), strict=True):
        assert result["config"]["zero_optimization"]["stage"] == int(strategy.split("_")[2])
        assert ("offload_optimizer" in result["config"]["zero_optimization"]) == strategy.endswith("offload")
        # plain: one backward per step; accumulate: two micro-batches, the first under no_backward_sync.
        for variant in ("plain", "accumulate"):
            weights, expected = result[variant], ddp_weights[variant]
            assert list(weights) == list(expected)
            for name, tensor in weights.items():
                torch.testing.assert_close(tensor, expected[name], atol=1e-5, rtol=0, msg=f"{variant} {name} {rank}")
                assert not torch.equal(tensor, initial_weights()[name]), f"{name} did not train"
        alone = result["alone"]  # setup(model) without an optimizer: an engine that evaluates like the module
        torch.testing.assert_close(alone["output"], deepspeed_job.network()(alone["probe"]), atol=0, rtol=0)
        assert alone["setup_optimizers_refusal"] == (
            f"The strategy {strategy!r} sets up a module and its optimizer together (deepspeed.initialize takes "
            f"both): call model, optimizer = lite.setup(model, optimizer) instead of setup_module / setup_optimizers."
        )


@pytest.mark.timeout(300)
def test_clipping_is_the_engines_and_what_it_would_not_do_is_refused(
    tmp_path: Path, ds_job: Callable[..., None]
) -> None:
    # DeepSpeed keeps the gradients in its partitions (param.grad is None on every stage), so clip_gradients through
    # torch.nn.utils clipped nothing and returned 0. The strategy_clip_gradients hook leaves the clip to the engine's
    # step when the norm is its gradient_clipping, and refuses a clip it would not do.
    ds_job("clipping", "deepspeed_stage_2", tmp_path)
    for result in results(tmp_path, "clipping"):
        assert result["config"]["gradient_clipping"] == deepspeed_job.CLIP
        assert result["returned"] is None  # the norm is known only inside the engine's step
        # One SGD step of lr 1: the update is the clipped gradient, of norm CLIP (the loss's own norm is far above).
        assert 0.5 * deepspeed_job.CLIP < result["update_norm"] <= deepspeed_job.CLIP * 1.01, result["update_norm"]
        assert "cannot clip gradients by value (clip_val=0.01" in result["refusals"]["value"]
        assert "DeepSpeedStrategy(stage=2, gradient_clipping=<max norm>)" in result["refusals"]["value"]
        assert ("clip_gradients(max_norm=1.0) (or Trainer(gradient_clip_val=1.0)) cannot clip"
                in result["refusals"]["other_norm"])
        assert "DeepSpeedStrategy(stage=2, gradient_clipping=1.0)" in result["refusals"]["other_norm"]


def initial_weights() -> dict[str, torch.Tensor]:
    return deepspeed_job.network().state_dict()


@pytest.fixture(scope="module")
def stage_3(tmp_path_factory: pytest.TempPathFactory, ds_job: Callable[..., None]) -> Path:
    """Stage 3 with every parameter sharded: trains 20 steps and saves at step 10; then a fresh run resumes."""
    directory = tmp_path_factory.mktemp("stage3")
    ds_job("sharded", "deepspeed_stage_3", directory)
    ds_job("resume", "deepspeed_stage_3", directory)
    return directory


@pytest.mark.timeout(400)
def test_stage_3_holds_half_of_the_parameters_on_each_rank_from_init_module_on(stage_3: Path) -> None:
    for result in results(stage_3, "sharded"):
        counts = result["counts"]
        for moment in ("after_init_module", "after_setup", "after_training"):
            count = counts[moment]
            assert count["partitioned"] == count["parameters"] == 4, moment  # zero.Init partitioned at creation
            assert count["materialised"] == 0, moment  # no full parameter left between forward passes
            assert count["total"] == 769
            # Half of each parameter, rounded up: at most one element of padding per parameter.
            assert count["total"] / 2 <= count["local"] <= count["total"] / 2 + count["parameters"], moment
        alone = result["alone"]  # setup(model) without an optimizer: a sharded engine that evaluates like the module
        torch.testing.assert_close(alone["output"], deepspeed_job.network()(alone["probe"]), atol=1e-6, rtol=0)
        assert "sets up a module and its optimizer together" in alone["setup_optimizers_refusal"]


@pytest.mark.timeout(400)
def test_a_sharded_checkpoint_loaded_into_a_fresh_run_continues_bitwise(stage_3: Path) -> None:
    saved = sorted(path.name for path in (stage_3 / "ckpt").iterdir())
    assert saved == ["checkpoint", "latest", "zero_to_fp32.py", "zero_to_torch.py"]
    shards = sorted(path.name for path in (stage_3 / "ckpt" / "checkpoint").iterdir())
    expected = [f"zero_pp_rank_{rank}_mp_rank_00_{kind}_states.pt" for rank in RANKS for kind in ("model", "optim")]
    assert shards == expected

    for uninterrupted, resumed in zip(results(stage_3, "sharded"), results(stage_3, "resume"), strict=True):
        assert resumed["step"] == deepspeed_job.SAVE_AT  # a plain value of the state, replaced by the saved one
        assert resumed["remaining"] == {"note": "halfway"}  # what the state did not ask for
        assert resumed["losses"] == uninterrupted["losses"][deepspeed_job.SAVE_AT :]
        for name, tensor in uninterrupted["weights"].items():
            assert torch.equal(resumed["weights"][name], tensor), name


@pytest.mark.timeout(400)
def test_the_consolidated_state_dict_loads_into_a_plain_module_with_the_same_outputs(stage_3: Path) -> None:
    consolidated = torch.load(stage_3 / "consolidated.pt", weights_only=True)
    assert set(consolidated) == {"model", "step", "note"}  # the optimizer's shards are not consolidated
    assert consolidated["step"] == deepspeed_job.SAVE_AT
    assert all(tensor.dtype == torch.float32 for tensor in consolidated["model"].values())

    plain = deepspeed_job.network(hidden=64)
    plain.load_state_dict(consolidated["model"])  # strict: every key of the plain module

    at_save = results(stage_3, "sharded")[0]
    torch.testing.assert_close(plain(at_save["probe"]), at_save["output_at_save"], atol=1e-6, rtol=0)


@pytest.mark.timeout(400)
def test_a_stage_3_module_set_up_without_optimizer_loads_the_checkpoint(stage_3: Path) -> None:
    """DeepSpeed's own load_checkpoint fails on such an engine (AttributeError in its ZeRO offload object); the
    strategy rebuilds the full weights from the shards and each rank keeps its partition."""
    at_save = results(stage_3, "sharded")[0]
    for resumed in results(stage_3, "resume"):
        assert resumed["evaluator_step"] == deepspeed_job.SAVE_AT
        torch.testing.assert_close(resumed["evaluator_output"], at_save["output_at_save"], atol=1e-6, rtol=0)


@pytest.mark.timeout(300)
def test_stage_3_offload_in_bf16_mixed_shards_offloads_and_checkpoints(
    tmp_path: Path, ds_job: Callable[..., None]
) -> None:
    ds_job("sharded", "deepspeed_stage_3_offload", tmp_path, "--precision", "bf16-mixed")

    for result in results(tmp_path, "sharded"):
        zero = result["config"]["zero_optimization"]
        assert result["config"]["bf16"] == {"enabled": True} and "fp16" not in result["config"]
        assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == "cpu"
        assert result["counts"]["after_training"]["materialised"] == 0
    consolidated = torch.load(tmp_path / "consolidated.pt", weights_only=True)
    plain = deepspeed_job.network(hidden=64)
    plain.load_state_dict(consolidated["model"])
    at_save = results(tmp_path, "sharded")[0]
    # The run computed in bfloat16 (8 bits of mantissa); the consolidated weights are the fp32 master copy.
    torch.testing.assert_close(plain(at_save["probe"]), at_save["output_at_save"], atol=0.03, rtol=0.03)


@pytest.mark.timeout(300)
def test_the_digits_example_trains_under_stage_3_to_the_accuracy_bar(
    tmp_path: Path, command: Callable[..., Any]
) -> None:
    flags = ["--accelerator", "cpu", "--strategy", "deepspeed_stage_3", "--devices", "2", "--epochs", "10"]
    finished = command([sys.executable, str(DIGITS), *flags], cwd=tmp_path, timeout=240)

    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert re.search(r"strategy\s+deepspeed_stage_3\s+\(core-deepspeed\)", finished.stdout)
    losses = [float(loss) for loss in re.findall(r"train loss (\d+\.\d+)", finished.stdout)]
    assert len(losses) == 10 and losses[-1] < losses[0] / 5, losses
    accuracy = re.findall(r"^test accuracy: (\d\.\d{4})$", finished.stdout, flags=re.MULTILINE)
    assert len(accuracy) == 1 and float(accuracy[0]) >= 0.95, finished.stdout
