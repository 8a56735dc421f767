"""The ``distributed`` checkpoint_io: DCP directories, atomic, weights-only, sharded by every rank, resharded
on load."""

from __future__ import annotations

import json
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from core_dcp import SKELETON_KEY, TENSOR_TAG, DistributedCheckpointIO

import core
from core.testing import CheckpointIOConformance


class TestDistributedConformance(CheckpointIOConformance):
    """The conformance kit every checkpoint_io passes, run on the installed entry point."""

    alias = "distributed"


@pytest.fixture
def io() -> DistributedCheckpointIO:
    return DistributedCheckpointIO()


def save(io: DistributedCheckpointIO, checkpoint: dict[str, Any], path: Path) -> None:
    io.checkpoint_io_save(checkpoint=checkpoint, path=str(path), storage_options=None)


def load(io: DistributedCheckpointIO, path: Path, weights_only: bool = True) -> dict[str, Any]:
    return io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=weights_only)


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_module_and_optimizer_state_come_back_as_load_state_dict_expects(
    io: DistributedCheckpointIO, tmp_path: Path
) -> None:
    model, optimizer = trained()
    fresh_optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
    save(io, {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "fresh": fresh_optimizer.state_dict()},
         tmp_path / "ckpt")
    loaded = load(io, tmp_path / "ckpt")
    # DCP alone would turn the integer parameter indices into strings and drop the empty state of a fresh
    # optimizer; both survive here, as does the module's version metadata.
    assert sorted(loaded["optimizer"]["state"]) == [0, 1, 2, 3]
    assert loaded["fresh"]["state"] == {}
    assert loaded["model"]._metadata == model.state_dict()._metadata  # type: ignore[attr-defined]  # torch's own
    other_model, other_optimizer = trained()
    other_optimizer.load_state_dict(loaded["optimizer"])
    restored, saved = other_optimizer.state_dict()["state"][2], optimizer.state_dict()["state"][2]
    assert torch.equal(restored["exp_avg"], saved["exp_avg"])
    other_model.load_state_dict(loaded["model"])


def test_a_second_save_replaces_the_first_and_leaves_no_temporary(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    save(io, {"v": torch.ones(2)}, tmp_path / "ckpt")
    save(io, {"v": torch.zeros(3)}, tmp_path / "ckpt")
    assert torch.equal(load(io, tmp_path / "ckpt")["v"], torch.zeros(3))
    assert [path.name for path in tmp_path.iterdir()] == ["ckpt"]


class CodeOnLoad:
    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.touch, (Path(self.mark),))


def test_weights_only_covers_the_values_and_the_metadata(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    mark = tmp_path / "code-ran"
    save(io, {"payload": CodeOnLoad(str(mark)), "v": torch.ones(1)}, tmp_path / "values")
    with pytest.raises(core.CheckpointError, match=r"Refused to load .*values.*weights_only=False"):
        load(io, tmp_path / "values")
    assert not mark.exists()

    save(io, {"v": torch.ones(1)}, tmp_path / "metadata")
    with open(tmp_path / "metadata" / ".metadata", "wb") as handle:
        pickle.dump(CodeOnLoad(str(mark)), handle)
    (tmp_path / "metadata" / ".checksums").unlink()  # a crafted directory comes without the checksums of the real one
    with pytest.raises(core.CheckpointError, match=r"Refused to load .*metadata.*\.metadata holds objects"):
        load(io, tmp_path / "metadata")
    assert not mark.exists()


def test_incomplete_missing_and_single_file_checkpoints(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    save(io, {"v": torch.ones(1)}, tmp_path / "cut")
    (tmp_path / "cut" / ".metadata").unlink()  # what a save killed before its last write leaves
    with pytest.raises(core.CheckpointError, match=r"'.*cut' is incomplete: it has no \.metadata"):
        load(io, tmp_path / "cut")
    with pytest.raises(core.CheckpointError, match=r"No checkpoint at '.*absent': the directory does not exist"):
        load(io, tmp_path / "absent")
    # A full checkpoint from the 'torch' checkpoint_io reads too, with the same safety.
    torch.save({"v": torch.ones(2)}, tmp_path / "file.pt")
    assert torch.equal(load(io, tmp_path / "file.pt")["v"], torch.ones(2))
    (tmp_path / "cut.pt").write_bytes((tmp_path / "file.pt").read_bytes()[:200])
    with pytest.raises(core.CheckpointError, match="corrupt or truncated"):
        load(io, tmp_path / "cut.pt")


def test_urls_and_storage_options_are_refused_with_the_way_out(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r"local or shared filesystem path, got the URL 'memory://x'"):
        io.checkpoint_io_save(checkpoint={}, path="memory://x", storage_options=None)
    with pytest.raises(core.ConfigurationError, match=(
        r"^The 'distributed' checkpoint_io takes no storage_options, got \{'a': 1\}; configure it with "
        r"DistributedCheckpointIO\(thread_count=\.\.\., sync_files=\.\.\.\)\.$"
    )):
        io.checkpoint_io_save(checkpoint={}, path=str(tmp_path / "c"), storage_options={"a": 1})


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_format_is_plain_dcp_with_dotted_tensor_keys(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    model, _ = trained()
    save(io, {"model": model.state_dict(), "step": 3}, tmp_path / "ckpt")
    template = {"model.0.weight": torch.empty(3, 4)}
    dcp.load(template, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True,
             planner=dcp.DefaultLoadPlanner(allow_partial_load=True))
    assert torch.equal(template["model.0.weight"], model.state_dict()["0.weight"])
    metadata = dcp.FileSystemReader(str(tmp_path / "ckpt")).read_metadata()
    assert SKELETON_KEY in metadata.state_dict_metadata


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_two_ranks_write_their_shards_and_one_process_reads_the_whole(
    tmp_path: Path, job: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    job("dcp_sharded_job.py", str(tmp_path))
    reports = [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]
    for report in reports:
        assert report == {"local_rows": 512, "weight_equal": True, "moment_equal": True,
                          "keys": ["model", "optimizer", "step"], "whole_equal": True}
    files = sorted(path.name for path in (tmp_path / "sharded").iterdir() if path.name != ".checksums")
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    listed = json.loads((tmp_path / "sharded" / ".checksums").read_text().split("\n")[0])["files"]
    assert sorted(listed) == files  # rank 0 sealed the other rank's file too
    # Each rank wrote its half of the two sharded 32 KiB tensors (and rank-local shares of the rest).
    sharded_bytes = 2 * 1024 * 8 * 4
    sizes = [(tmp_path / "sharded" / name).stat().st_size for name in files[1:]]
    assert all(sharded_bytes / 2 <= size < sharded_bytes for size in sizes), sizes
    # Resharding: world size 2 wrote it, this single process reads it whole.
    loaded = load(DistributedCheckpointIO(), tmp_path / "sharded")
    expected = torch.arange(1024 * 8, dtype=torch.float32).reshape(1024, 8)
    assert torch.equal(loaded["model"]["weight"], expected)
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], expected * 2)
    assert loaded["step"] == 5 and loaded["optimizer"]["param_groups"] == [{"params": [0]}]
    # Rank 0 alone wrote the whole state under ddp: one data file.
    assert sorted(path.name for path in (tmp_path / "whole").iterdir()) == [".checksums", ".metadata", "__0_0.distcp"]



@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_ranks_whose_skeletons_differ_load_merged_in_rank_order(io: DistributedCheckpointIO, tmp_path: Path) -> None:
    """Ranks that wrote different parts of one checkpoint (core-diloco's groups) each kept their skeleton, under
    ``f"{SKELETON_KEY}.{rank}"``: loading merges them, nothing of either lost, the lower rank's value standing where
    both have one. Written here as a collective save of two such ranks leaves it (plain DCP, one process)."""
    import torch.distributed.checkpoint as dcp

    first, second = torch.arange(4.0), torch.arange(4.0) + 10
    skeletons = {
        0: {"model": {"w": {TENSOR_TAG: "model.w"}}, "step": 3, "groups": {"group": 0}},
        2: {"groups": {"group": 0, "others": {"1": {"model": {"w": {TENSOR_TAG: "groups.others.1.model.w"}},
                                                    "step": 3}}}, "step": 4},
    }
    flat: dict[str, Any] = {"model.w": first, "groups.others.1.model.w": second}
    flat.update({f"{SKELETON_KEY}.{rank}": (skeleton,) for rank, skeleton in skeletons.items()})
    dcp.save(flat, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    merged = load(io, tmp_path / "ckpt")
    assert torch.equal(merged["model"]["w"], first)
    assert torch.equal(merged["groups"]["others"]["1"]["model"]["w"], second)
    assert merged["groups"]["group"] == 0 and merged["groups"]["others"]["1"]["step"] == 3
    assert merged["step"] == 3  # both have it: rank 0's stands, as the single kept skeleton of before gave
    flat[f"{SKELETON_KEY}.2"] = "not a wrapped skeleton"
    dcp.save(flat, checkpoint_id=str(tmp_path / "bad"), no_dist=True)
    with pytest.raises(core.CheckpointError, match=rf"malformed '{SKELETON_KEY}.2' entry"):
        load(io, tmp_path / "bad")
