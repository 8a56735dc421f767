"""The ``safetensors`` checkpoint_io in one process: Hugging Face's files exactly, files written elsewhere load, bad
input is a CheckpointError naming what is wrong, shard plans hold their invariants, and ``python -m core.checkpoint
convert`` turns a ``distributed`` checkpoint into this format and back."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from core_dcp import DistributedCheckpointIO
from core_safetensors import (
    INDEX_NAME,
    WEIGHTS_NAME,
    SafetensorsCheckpointIO,
    load_weights,
    parse_size,
    plan_shards,
    read_weights,
    save_weights,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

import core
from core.checkpoint import convert, detect_format
from core.checkpoint import main as checkpoint_main
from core.testing import CheckpointIOConformance


class TestSafetensorsConformance(CheckpointIOConformance):
    """The conformance kit every checkpoint_io passes, run on the installed entry point."""

    alias = "safetensors"


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = network()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    return model, optimizer


def save(io: SafetensorsCheckpointIO, checkpoint: dict[str, Any], path: Path) -> None:
    io.checkpoint_io_save(checkpoint=checkpoint, path=str(path), storage_options=None)


def load(io: SafetensorsCheckpointIO, path: Path, weights_only: bool = True) -> dict[str, Any]:
    return io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=weights_only)


def same(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> bool:
    return left.keys() == right.keys() and all(
        left[name].dtype == right[name].dtype and torch.equal(left[name], right[name]) for name in right)


# -- Hugging Face's layout -------------------------------------------------------------------------------------------


def test_one_module_file_with_the_rest_beside_it(tmp_path: Path) -> None:
    model, optimizer = trained()
    save(SafetensorsCheckpointIO(), {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 4},
         tmp_path / "ckpt")
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert names == [".checksums", "core_safetensors.json", WEIGHTS_NAME, "state.pt"]
    assert same(load_file(str(tmp_path / "ckpt" / WEIGHTS_NAME)), model.state_dict())  # the library reads it as is
    loaded = load(SafetensorsCheckpointIO(), tmp_path / "ckpt")
    assert loaded["step"] == 4 and same(loaded["model"], model.state_dict())
    fresh = torch.optim.Adam(network().parameters(), lr=0.1)
    fresh.load_state_dict(loaded["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert [path.name for path in tmp_path.iterdir()] == ["ckpt"]  # nothing temporary left


def test_shards_carry_hugging_faces_index(tmp_path: Path) -> None:
    state = {name: value.to(dtype) for (name, value), dtype in
             zip(network().state_dict().items(), [torch.float32, torch.bfloat16, torch.float64, torch.float16,
                                                  torch.float32, torch.float32], strict=True)}
    state["counts"] = torch.arange(7)
    state["mask"] = torch.tensor([True, False])
    save_weights(state, tmp_path / "hf", max_shard_size="100B")
    index = json.loads((tmp_path / "hf" / INDEX_NAME).read_text())
    assert set(index) == {"metadata", "weight_map"}
    assert index["metadata"] == {"total_size": sum(value.nbytes for value in state.values())}
    files = sorted(path.name for path in (tmp_path / "hf").glob("*.safetensors"))
    assert files == [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
    assert len(files) > 2 and set(index["weight_map"].values()) == set(files)
    assert index["weight_map"].keys() == state.keys()
    for file in files:
        tensors = load_file(str(tmp_path / "hf" / file))
        assert len(tensors) == 1 or sum(value.nbytes for value in tensors.values()) <= 100
        assert all(index["weight_map"][name] == file for name in tensors)
    assert same(read_weights(tmp_path / "hf"), state)


def test_tied_weights_are_written_twice_and_load_strictly(tmp_path: Path) -> None:
    embedding, head = torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7, bias=False)
    head.weight = embedding.weight
    save_weights(torch.nn.Sequential(embedding, head), tmp_path / "tied")
    other_embedding, other_head = torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7, bias=False)
    load_weights(torch.nn.Sequential(other_embedding, other_head), tmp_path / "tied")
    assert torch.equal(other_embedding.weight, embedding.weight) and torch.equal(other_head.weight, embedding.weight)


@given(sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=30),
       maximum=st.integers(min_value=1, max_value=400))
def test_shard_plans_keep_order_and_size_and_are_greedy(sizes: list[int], maximum: int) -> None:
    named = [(f"t{index}", size) for index, size in enumerate(sizes)]
    size_of = dict(named)
    shards = plan_shards(named, maximum)
    assert [name for shard in shards for name in shard] == [name for name, _ in named]  # each once, in order
    assert all(shard for shard in shards)
    for shard in shards:
        assert len(shard) == 1 or sum(size_of[name] for name in shard) <= maximum
    for current, following in itertools.pairwise(shards):  # never closed while the next still fitted
        assert sum(size_of[name] for name in current) + size_of[following[0]] > maximum
    assert plan_shards(named, None) == ([[name for name, _ in named]] if named else [])


@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=8),
       dtypes=st.lists(st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.uint8]), min_size=8,
                       max_size=8),
       maximum=st.integers(min_value=1, max_value=200))
def test_any_weights_cut_at_any_size_read_back_bitwise(lengths: list[int], dtypes: list[torch.dtype],
                                                       maximum: int) -> None:
    state = {f"block{7 - index}.weight": (torch.arange(length) * 7 - 3).to(dtypes[index])
             for index, length in enumerate(lengths)}
    with tempfile.TemporaryDirectory() as tmp:
        save_weights(state, Path(tmp) / "w", max_shard_size=maximum)
        files = sorted((Path(tmp) / "w").glob("*.safetensors"))
        assert len(files) == len(plan_shards([(name, value.nbytes) for name, value in state.items()], maximum))
        assert (len(files) > 1) == (Path(tmp) / "w" / INDEX_NAME).is_file()
        loaded = read_weights(Path(tmp) / "w")
    assert same(loaded, state)
    assert list(loaded) == (list(state) if len(files) > 1 else sorted(state))  # the index keeps the state's order


@given(count=st.integers(min_value=1, max_value=10**6),
       unit=st.sampled_from([("", 1), ("B", 1), ("KB", 10**3), ("MB", 10**6), ("GiB", 2**30), ("mib", 2**20)]))
def test_sizes_parse_as_huggingface_hub_reads_them(count: int, unit: tuple[str, int]) -> None:
    assert parse_size(f"{count}{unit[0]}") == count * unit[1]
    assert parse_size(count) == count


@pytest.mark.parametrize("bad", [0, -5, "5XB", "GB", "1.5", True, 2.0, "-1MB"])
def test_a_bad_shard_size_names_the_value_and_the_units(bad: Any) -> None:
    with pytest.raises(core.ConfigurationError, match=r"max_shard_size=.*'5GB'"):
        SafetensorsCheckpointIO(max_shard_size=bad)


# -- files written outside the project -------------------------------------------------------------------------------


def test_a_file_written_by_save_file_loads(tmp_path: Path) -> None:
    model = network()
    save_file(model.state_dict(), str(tmp_path / "lone.safetensors"))
    (tmp_path / "hub").mkdir()
    save_file(model.state_dict(), str(tmp_path / "hub" / WEIGHTS_NAME), metadata={"format": "pt"})
    for path in (tmp_path / "lone.safetensors", tmp_path / "hub"):
        assert same(load(SafetensorsCheckpointIO(), path)["model"], model.state_dict())
        other = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
        load_weights(other, path)
        assert same(other.state_dict(), model.state_dict())


def test_shards_written_the_way_transformers_writes_them_load_through_lite(tmp_path: Path) -> None:
    model = network()
    state = model.state_dict()
    names = list(state)
    files = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
    for file, members in files.items():
        save_file({name: state[name] for name in members}, str(tmp_path / file), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 1}, "weight_map": {n: f for f, members in files.items() for n in members}}
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))

    def restore(lite: core.Lite) -> dict[str, torch.Tensor]:
        fresh = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
        module = lite.setup(fresh)
        assert lite.load(tmp_path, {"model": module}) == {}
        return fresh.state_dict()

    lite = core.Lite(accelerator="cpu", strategy="single_device", devices=1,
                     plugins=["local", SafetensorsCheckpointIO()])
    assert same(lite.launch(restore), state)


# -- bad input -------------------------------------------------------------------------------------------------------


def test_key_and_shape_mismatches_name_the_keys_and_both_shapes(tmp_path: Path) -> None:
    save_weights(network(), tmp_path / "w")
    wrong = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 3),
                                torch.nn.Linear(3, 2))
    with pytest.raises(core.CheckpointError) as mismatch:
        load_weights(wrong, tmp_path / "w")
    message = str(mismatch.value)
    assert "0.weight: file (5, 6) vs module (4, 6)" in message
    assert "3.weight (2, 3)" in message and "the files lack" in message
    first = torch.nn.Linear(6, 5)
    partial = torch.nn.Sequential(first)
    extra = r"4 key\(s\) the files have and the module lacks: \['1.bias \(5,\)', '1.weight \(5,\)'"
    with pytest.raises(core.CheckpointError, match=extra):
        load_weights(partial, tmp_path / "w")
    load_weights(partial, tmp_path / "w", strict=False)
    assert torch.equal(first.weight, network().state_dict()["0.weight"])


def test_key_mismatches_through_lite_load_are_checkpoint_errors(tmp_path: Path) -> None:
    save(SafetensorsCheckpointIO(), {"model": network().state_dict()}, tmp_path / "ckpt")

    def restore(lite: core.Lite) -> None:
        wrong = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
        lite.load(tmp_path / "ckpt", {"model": lite.setup(wrong)})

    lite = core.Lite(accelerator="cpu", strategy="single_device", devices=1,
                     plugins=["local", SafetensorsCheckpointIO()])
    with pytest.raises(core.CheckpointError, match=r"0.weight: checkpoint \(5, 6\) vs module \(3, 6\)"):
        lite.launch(restore)


def test_a_flipped_bit_names_the_file_and_the_tensor(tmp_path: Path) -> None:
    save_weights(network(), tmp_path / "w", max_shard_size=64)
    index = json.loads((tmp_path / "w" / INDEX_NAME).read_text())
    damaged = tmp_path / "w" / index["weight_map"]["2.weight"]
    content = bytearray(damaged.read_bytes())
    content[-3] ^= 0x10
    damaged.write_bytes(bytes(content))
    with pytest.raises(core.CheckpointError, match=rf"corrupt: its file '{damaged.name}'.*'2.weight'"):
        load(SafetensorsCheckpointIO(), tmp_path / "w")


def test_truncated_or_damaged_files_are_checkpoint_errors_even_without_checksums(tmp_path: Path) -> None:
    io = SafetensorsCheckpointIO(checksums=False)
    save_weights(network(), tmp_path / "w", checksums=False)
    file = tmp_path / "w" / WEIGHTS_NAME
    whole = file.read_bytes()
    file.write_bytes(whole[:-10])
    with pytest.raises(core.CheckpointError, match=rf"{file.name}.*truncated or damaged"):
        load(io, tmp_path / "w")
    file.write_bytes(whole[:5])
    with pytest.raises(core.CheckpointError, match="not a readable safetensors file"):
        load_weights(network(), tmp_path / "w")
    file.write_bytes(whole[:8] + b"[" + whole[9:])
    with pytest.raises(core.CheckpointError, match="header is not JSON"):
        read_weights(tmp_path / "w")


def test_a_damaged_or_incomplete_index_is_a_checkpoint_error(tmp_path: Path) -> None:
    save_weights(network(), tmp_path / "w", max_shard_size=64, checksums=False)
    index = tmp_path / "w" / INDEX_NAME
    document = json.loads(index.read_text())
    (tmp_path / "w" / document["weight_map"]["0.bias"]).unlink()
    with pytest.raises(core.CheckpointError, match=r"incomplete: its model.safetensors.index.json names"):
        read_weights(tmp_path / "w")
    index.write_text("{not json")
    with pytest.raises(core.CheckpointError, match=r"index .* is damaged"):
        read_weights(tmp_path / "w")


def test_what_is_not_a_state_dict_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r"holds other values: \{'note': 'str'\}"):
        save(SafetensorsCheckpointIO(), {"model": {"w": torch.ones(2), "note": "x"}}, tmp_path / "ckpt")
    with pytest.raises(core.ConfigurationError, match=r"weights_key='net'.*entries: \['model'\]"):
        save(SafetensorsCheckpointIO(weights_key="net"), {"model": {}}, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_options_and_paths_it_cannot_take_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r"writers='ranks'.*\['all', 'rank0'\]"):
        SafetensorsCheckpointIO(writers="ranks")
    with pytest.raises(core.ConfigurationError, match="takes no storage_options"):
        SafetensorsCheckpointIO().checkpoint_io_save(checkpoint={}, path=str(tmp_path / "c"), storage_options={"a": 1})
    with pytest.raises(core.ConfigurationError, match="got the URL 's3://bucket/ckpt'"):
        SafetensorsCheckpointIO().checkpoint_io_save(checkpoint={}, path="s3://bucket/ckpt", storage_options=None)


def test_missing_weights_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(core.CheckpointError, match=str(tmp_path / "none")):
        read_weights(tmp_path / "none")
    with pytest.raises(core.CheckpointError, match="holds no safetensors weights"):
        read_weights(tmp_path)


def test_a_trainer_checkpoint_keeps_its_state_dict_key(tmp_path: Path) -> None:
    save(SafetensorsCheckpointIO(), {"state_dict": network().state_dict(), "epoch": 2}, tmp_path / "ckpt")
    loaded = load(SafetensorsCheckpointIO(), tmp_path / "ckpt")
    assert sorted(loaded) == ["epoch", "state_dict"] and same(loaded["state_dict"], network().state_dict())


# -- python -m core.checkpoint ---------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_convert_turns_a_distributed_checkpoint_into_safetensors_and_back(tmp_path: Path) -> None:
    model, optimizer = trained()
    DistributedCheckpointIO().checkpoint_io_save(
        checkpoint={"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 9},
        path=str(tmp_path / "dcp"), storage_options=None)
    assert checkpoint_main(["convert", str(tmp_path / "dcp"), str(tmp_path / "hf"), "--option",
                            "max_shard_size=100"]) == 0
    assert detect_format(str(tmp_path / "hf")) == "safetensors"
    assert same(read_weights(tmp_path / "hf"), model.state_dict())
    assert convert(str(tmp_path / "hf"), str(tmp_path / "back")) == ("safetensors", "distributed")
    back = DistributedCheckpointIO().checkpoint_io_load(path=str(tmp_path / "back"), map_location="cpu",
                                                        weights_only=True)
    assert back["step"] == 9 and same(back["model"], model.state_dict())
    assert torch.equal(back["optimizer"]["state"][3]["exp_avg_sq"], optimizer.state_dict()["state"][3]["exp_avg_sq"])


def test_convert_errors_name_the_path_or_the_alias(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert checkpoint_main(["convert", str(tmp_path / "absent"), str(tmp_path / "out")]) == 1
    assert f"No checkpoint at '{tmp_path / 'absent'}'" in capsys.readouterr().err
    (tmp_path / "odd").mkdir()
    with pytest.raises(core.ConfigurationError, match="--from ALIAS"):
        detect_format(str(tmp_path / "odd"))
    save_weights(network(), tmp_path / "w")
    with pytest.raises(core.UnknownPluginError, match="'orbax'"):
        convert(str(tmp_path / "w"), str(tmp_path / "out"), target_format="orbax")


def test_the_plugin_is_listed_from_metadata() -> None:
    listing = subprocess.run([sys.executable, "-m", "core.plugins", "--kind", "checkpoint_io"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert any(line.split()[1:3] == ["safetensors", "core-safetensors"] for line in listing.splitlines() if line)
