"""The ``fsdp`` strategy on 2 real processes over gloo, and its configuration without processes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from core_fsdp import FSDPStrategy, auto_wrap_units
from fsdp_job import architecture
from torch.distributed.fsdp import MixedPrecisionPolicy

import core

Job = Callable[..., subprocess.CompletedProcess[str]]


def reports(directory: Path, mode: str) -> list[dict[str, Any]]:
    return [json.loads((directory / f"{mode}-report-{rank}.json").read_text()) for rank in (0, 1)]


def weights(directory: Path, mode: str) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(directory / f"{mode}-weights.pt", weights_only=True)
    return loaded


def assert_close(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for name in left:
        torch.testing.assert_close(left[name], right[name], rtol=0, atol=1e-5, msg=name)


def assert_clipped_like_ddp(directory: Path, mode: str, ddp_run: Path) -> None:
    """Every step clipped the gradient norm (fsdp_job.CLIP) to the global norm, as ddp does: the same norms on both
    ranks as under ddp (a per-rank norm of the shards would differ), returned as plain tensors, not DTensors."""
    from fsdp_job import CLIP

    expected = reports(ddp_run, "ddp")[0]["clip_norms"]
    assert any(norm > CLIP for _, norm in expected) and any(norm < CLIP for _, norm in expected)
    for report in reports(directory, mode):
        assert [name for name, _ in report["clip_norms"]] == ["Tensor"] * len(expected)
        torch.testing.assert_close([norm for _, norm in report["clip_norms"]], [norm for _, norm in expected],
                                   rtol=1e-5, atol=0)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory, job: Job) -> Path:
    """The same training under ddp, the reference for every fsdp run."""
    directory = tmp_path_factory.mktemp("ddp")
    job("fsdp_job.py", "ddp", str(directory))
    return directory


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_sharded_training_matches_ddp_and_each_rank_holds_half(tmp_path: Path, job: Job, ddp_run: Path) -> None:
    job("fsdp_job.py", "fsdp-sharded", str(tmp_path))
    assert_close(weights(tmp_path, "fsdp-sharded"), weights(ddp_run, "ddp"))
    assert_clipped_like_ddp(tmp_path, "fsdp-sharded", ddp_run)
    rank0, rank1 = reports(tmp_path, "fsdp-sharded")
    total = rank0["total_elements"]
    assert rank0["local_elements"] + rank1["local_elements"] == total == 10 * 32 + 32 + 32 * 32 + 32 + 32 + 1
    assert all(0.45 * total <= report["local_elements"] <= 0.55 * total for report in (rank0, rank1))
    assert all(report["local_elements"] == total for report in reports(ddp_run, "ddp"))
    for report in (rank0, rank1):
        assert report["checkpoint_io"] == "distributed"
        assert report["restored"] and report["moments_restored"]
        # init_module(empty_init=True): parameters on meta, then only this rank's shards allocated and loaded.
        assert report["created_on_meta"] and report["materialised"]
        assert report["empty_local_elements"] == report["local_elements"]
        assert report["empty_restored"] and report["empty_moments_restored"]
    files = sorted(path.name for path in (tmp_path / "sharded").iterdir())
    assert files == [".checksums", ".metadata", "__0_0.distcp", "__1_0.distcp"]

    # The checkpoint 2 ranks wrote, loaded by 1 process into a plain module: resharded to whole tensors.
    def load_alone(lite: core.Lite) -> dict[str, torch.Tensor]:
        network = lite.setup(architecture())
        remainder = lite.load(tmp_path / "sharded", {"model": network}, strict=False)
        assert remainder["step"] == 20 and sorted(remainder["optimizer"]["state"]) == [0, 1, 2, 3, 4, 5]
        return {name: value.detach().clone() for name, value in network.state_dict().items()}

    alone = core.Lite(accelerator="cpu", devices=1, plugins=["distributed"]).launch(load_alone)
    assert alone is not None  # one process: rank 0's result
    assert_close(alone, weights(tmp_path, "fsdp-sharded"))


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_full_checkpoint_is_one_file_from_rank_zero(tmp_path: Path, job: Job, ddp_run: Path) -> None:
    job("fsdp_job.py", "fsdp-full", str(tmp_path))
    assert_close(weights(tmp_path, "fsdp-full"), weights(ddp_run, "ddp"))
    for report in reports(tmp_path, "fsdp-full"):
        assert report["checkpoint_io"] == "torch" and report["restored"] and report["moments_restored"]
    full = torch.load(tmp_path / "full.pt", weights_only=True)
    assert sorted(full) == ["model", "optimizer", "step"]
    assert_close(dict(full["model"]), weights(tmp_path, "fsdp-full"))
    assert all(type(value) is torch.Tensor for value in full["model"].values())  # whole tensors, no DTensor
    assert full["optimizer"]["state"][0]["exp_avg"].shape == (32, 10)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_accumulation_without_sync_and_cpu_offload_train_like_ddp(tmp_path: Path, job: Job, ddp_run: Path) -> None:
    job("fsdp_job.py", "fsdp-accumulate", str(tmp_path))
    assert_close(weights(tmp_path, "fsdp-accumulate"), weights(ddp_run, "ddp"))
    assert_clipped_like_ddp(tmp_path, "fsdp-accumulate", ddp_run)


# -------------------------------------------------------------------------------------------------
# Without processes: options, compatibility, auto-wrap units
# -------------------------------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)


def network() -> torch.nn.Sequential:
    return torch.nn.Sequential(Block(), Block(), torch.nn.Linear(8, 2))


def test_auto_wrap_by_class_by_parameter_count_and_by_function() -> None:
    root = network()
    assert auto_wrap_units(root, None) == []
    assert auto_wrap_units(root, {Block}) == [root[0], root[1]]
    # Innermost first: a Linear inside a Block is its own unit before the Block would be considered.
    assert auto_wrap_units(root, {Block, torch.nn.Linear}) == [root[0].inner, root[0], root[1].inner, root[1], root[2]]
    # 72 parameters in a Linear(8, 8), 16 in the norm: a Block holds 88, the last Linear 18.
    assert auto_wrap_units(root, 80) == [root[0], root[1]]
    assert auto_wrap_units(root, 70) == [root[0].inner, root[1].inner]
    assert auto_wrap_units(root, lambda module: isinstance(module, torch.nn.LayerNorm)) == [root[0].norm, root[1].norm]


@pytest.mark.parametrize(
    ("policy", "message"),
    [(0, "minimum parameter count must be >= 1"), ({int}, "expected torch.nn.Module subclasses"),
     (True, "is not a policy"), ("Linear", "is not a policy")],
)
def test_a_malformed_policy_is_refused_at_construction(policy: Any, message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=message):
        FSDPStrategy(auto_wrap_policy=policy)


def test_the_checkpoint_layout_selects_the_checkpoint_io() -> None:
    sharded = core.Lite(accelerator="cpu", strategy="fsdp", devices=2)
    assert sharded.active.config.checkpoint_io == "distributed"
    full = core.Lite(accelerator="cpu", strategy=FSDPStrategy(state_dict_type="full"), devices=2)
    assert full.active.config.checkpoint_io == "torch"
    with pytest.raises(core.ConfigurationError, match=r"state_dict_type='gathered'.*\['sharded', 'full'\]"):
        FSDPStrategy(state_dict_type="gathered")


def test_refusals_name_the_pair_and_the_way_out() -> None:
    with pytest.raises(core.ConfigurationError) as sharded_to_file:
        core.Lite(accelerator="cpu", strategy="fsdp", devices=2, plugins=["torch"])
    message = str(sharded_to_file.value)
    assert "'fsdp'" in message and "checkpoint_io 'torch'" in message and "state_dict_type='full'" in message
    with pytest.raises(core.ConfigurationError, match=r"precision '16-mixed'.*use precision='bf16-mixed'"):
        core.Lite(accelerator="cpu", strategy="fsdp", devices=2, precision="16-mixed")
    # A full checkpoint is one file from rank 0: the single-file checkpoint_io plugins are fine then.
    core.Lite(accelerator="cpu", strategy=FSDPStrategy(state_dict_type="full"), devices=2, plugins=["torch"])


def test_cpu_offload_alias_and_mixed_precision_from_the_precision_plugin() -> None:
    offload = core.Lite(accelerator="cpu", strategy="fsdp_cpu_offload", devices=2).active.strategy
    assert isinstance(offload, FSDPStrategy) and offload.cpu_offload and offload.name == "fsdp_cpu_offload"
    bf16 = core.Lite(accelerator="cpu", strategy="fsdp", devices=2, precision="bf16-mixed").active.strategy
    assert isinstance(bf16, FSDPStrategy)
    assert bf16._mixed_precision() == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    plain = core.Lite(accelerator="cpu", strategy="fsdp", devices=2).active.strategy
    assert isinstance(plain, FSDPStrategy) and plain._mixed_precision() == MixedPrecisionPolicy()
    chosen = MixedPrecisionPolicy(param_dtype=torch.float16)
    given = core.Lite(accelerator="cpu", strategy=FSDPStrategy(mixed_precision=chosen), devices=2).active.strategy
    assert isinstance(given, FSDPStrategy) and given._mixed_precision() is chosen


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_the_trainer_on_fsdp_resumes_from_sharded_resumable_checkpoints(tmp_path: Path, job: Job) -> None:
    job("fsdp_trainer_job.py", str(tmp_path / "uninterrupted"), "10")
    job("fsdp_trainer_job.py", str(tmp_path / "resumed"), "7")  # stops after step 7; the last checkpoint is step 6
    job("fsdp_trainer_job.py", str(tmp_path / "resumed"), "10")
    assert (tmp_path / "resumed" / "first-step-10.txt").read_text() == "7", "the second fit did not resume at step 6"
    uninterrupted = torch.load(tmp_path / "uninterrupted" / "final-10.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "final-10.pt", weights_only=True)
    assert uninterrupted.keys() == resumed.keys()
    assert all(torch.equal(uninterrupted[name], resumed[name]) for name in resumed)
    newest = tmp_path / "resumed" / "resumable" / "step-000000009" / "checkpoint.pt"
    shards = sorted(path.name for path in newest.iterdir())
    assert shards == [".checksums", ".metadata", "__0_0.distcp", "__1_0.distcp"]
