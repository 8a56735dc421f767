"""Round trips across layouts, on 2 gloo ranks: weights written by one process, ddp, fsdp or model_parallel load
bitwise into every other, a sharded module reads only its own slices, and a training state resumes bitwise.

One module-scoped chain of three jobs (scripts/layouts_job.py) serves every assertion: the test process writes
``single/weights``; the ddp job loads them, the fsdp job loads ddp's, the model_parallel job loads fsdp's, and the
test process reads model_parallel's back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from core_safetensors import SafetensorsCheckpointIO, read_weights, save_weights
from safetensors_jobs import run_script
from safetensors_net import MAX_SHARD_SIZE, reference

from core.checkpoint import convert

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]
LAYOUTS = ("ddp", "fsdp", "model_parallel")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("layouts")
    save_weights(reference(), out / "single" / "weights", max_shard_size=MAX_SHARD_SIZE)
    source = "single"
    for layout in LAYOUTS:
        run_script("layouts_job.py", layout, str(out), str(out / source), timeout=150)
        source = layout
    return out


def reports(out: Path, layout: str) -> list[dict[str, Any]]:
    return [json.loads((out / layout / f"report-{rank}.json").read_text()) for rank in (0, 1)]


def weight_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.safetensors"))}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_weights_from_another_layout_load_bitwise(chain: Path, layout: str) -> None:
    for report in reports(chain, layout):
        assert report["lite_load_equal"], report  # Lite.load through the strategy (whole tensors, kept sliced)
        assert report["load_weights_equal"], report  # load_weights (slices only)


@pytest.mark.parametrize("layout", ["fsdp", "model_parallel"])
def test_a_sharded_module_reads_only_its_own_slices(chain: Path, layout: str) -> None:
    ranks = reports(chain, layout)
    assert all(report["placements"] for report in ranks), "the module was not sharded: nothing is tested"
    for report in ranks:
        assert report["bytes_read"] == report["local_bytes"], report
    whole = sum(value.nbytes for value in reference().values())
    assert all(report["bytes_read"] < 0.6 * whole for report in ranks), (ranks, whole)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_writes_the_same_bytes_as_one_process(chain: Path, layout: str) -> None:
    single = weight_bytes(chain / "single" / "weights")
    assert len(single) == 5, sorted(single)  # MAX_SHARD_SIZE spreads Net over five files
    assert weight_bytes(chain / layout / "weights") == single
    index = json.loads((chain / layout / "weights" / "model.safetensors.index.json").read_text())
    assert index == json.loads((chain / "single" / "weights" / "model.safetensors.index.json").read_text())


def test_gathering_on_rank_zero_writes_the_same_files_as_every_rank_writing_its_own(chain: Path) -> None:
    assert weight_bytes(chain / "fsdp" / "rank0") == weight_bytes(chain / "fsdp" / "weights")


def test_the_last_layouts_files_read_back_in_one_process(chain: Path) -> None:
    loaded = read_weights(chain / "model_parallel" / "weights")
    expected = reference()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[name], expected[name]) for name in expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_training_state_resumes_bitwise_in_its_layout(chain: Path, layout: str) -> None:
    for report in reports(chain, layout):
        assert report["resumed_model_equal"] and report["resumed_optimizer_equal"], report
        assert report["remainder"] == {"step": 1}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_training_state_of_any_layout_loads_whole_in_one_process(chain: Path, layout: str) -> None:
    trained = chain / layout / "trained"
    # sharded optimizer state stays in core-dcp's format beside the weights; ddp's is one torch file
    assert (trained / ("state.pt" if layout == "ddp" else "state")).exists()
    loaded = SafetensorsCheckpointIO().checkpoint_io_load(path=str(trained), map_location="cpu", weights_only=True)
    expected = torch.load(chain / layout / "expected.pt", weights_only=True)
    assert loaded["step"] == 1
    for name, value in expected["model"].items():
        assert torch.equal(loaded["model"][name], value), name
    for index, state in expected["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(loaded["optimizer"]["state"][index][name], value), (index, name)


def test_python_m_core_checkpoint_converts_a_sharded_checkpoint_to_dcp_and_back(chain: Path, tmp_path: Path) -> None:
    trained = chain / "fsdp" / "trained"
    finished = subprocess.run([sys.executable, "-m", "core.checkpoint", "convert", str(trained), str(tmp_path / "dcp")],
                              capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == f"{trained} (safetensors) -> {tmp_path / 'dcp'} (distributed)"
    assert (tmp_path / "dcp" / ".metadata").is_file()
    convert(str(tmp_path / "dcp"), str(tmp_path / "hf"), target_options={"max_shard_size": MAX_SHARD_SIZE})
    assert weight_bytes(tmp_path / "hf") == weight_bytes(trained)
    io = SafetensorsCheckpointIO()
    before = io.checkpoint_io_load(path=str(trained), map_location="cpu", weights_only=True)
    after = io.checkpoint_io_load(path=str(tmp_path / "hf"), map_location="cpu", weights_only=True)
    moments = [(index, name) for index, state in before["optimizer"]["state"].items() for name in state]
    assert moments and all(torch.equal(after["optimizer"]["state"][index][name],
                                       before["optimizer"]["state"][index][name]) for index, name in moments)
