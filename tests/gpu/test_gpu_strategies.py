"""On a real CUDA device: NCCL process groups of world size 1 through ``ddp``, ``fsdp`` and ``model_parallel``,
``torch.compile`` under ``single_device`` and ``fsdp``, and a ``distributed`` (torch.distributed.checkpoint) save and
load round trip of device tensors.

The process-group cases run in one child process (tests/gpu/gpu_strategy_job.py, one ``Lite.launch`` per case), started
once for the module; each test reads its case's record. The same script runs over gloo on the CPU, which is how it is
checked without a GPU; these tests only run where torch sees a CUDA device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from core import Lite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]

JOB = Path(__file__).with_name("gpu_strategy_job.py")
_LAUNCH_VARIABLES = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "LOCAL_WORLD_SIZE", "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "CORE_DDP_JOB"}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("strategies") / "cases.json"
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    finished = subprocess.run([sys.executable, str(JOB), str(out), "cuda"], capture_output=True, text=True,
                              timeout=130, env=environment)  # under pytest-timeout's 140 s
    assert out.exists(), finished.stdout[-3000:] + finished.stderr[-3000:]
    cases: dict[str, Any] = json.loads(out.read_text())
    return cases


def case(job: dict[str, Any], name: str) -> dict[str, Any]:
    record = job[name]
    assert record["ok"], record.get("traceback", record)
    return record


def assert_trained_on_nccl(record: dict[str, Any], parameter_type: str) -> None:
    assert record["backend"] == "nccl"
    assert record["world_size"] == 1
    assert record["device"] == "cuda:0"
    assert record["parameter_devices"] == ["cuda:0"]
    assert record["parameter_types"] == [parameter_type]
    assert record["losses"][-1] < record["losses"][0]
    assert record["reduced"] == [2.0, 2.0, 2.0]  # an NCCL all-reduce over one rank of a CUDA tensor
    assert record["reduced_device"] == "cuda:0"


def test_ddp_world_size_1_trains_over_nccl(job: dict[str, Any]) -> None:
    assert_trained_on_nccl(case(job, "ddp"), "Tensor")


def test_fsdp_world_size_1_shards_into_dtensors_on_the_device(job: dict[str, Any]) -> None:
    assert_trained_on_nccl(case(job, "fsdp"), "DTensor")


def test_model_parallel_1x1_mesh_trains_over_nccl(job: dict[str, Any]) -> None:
    assert_trained_on_nccl(case(job, "model_parallel"), "DTensor")


def test_compiled_model_under_fsdp_trains_like_the_eager_one(job: dict[str, Any]) -> None:
    compiled, eager = case(job, "fsdp_compiled"), case(job, "fsdp")
    assert_trained_on_nccl(compiled, "DTensor")
    assert compiled["compiled_graphs"] >= 1
    assert compiled["losses"] == pytest.approx(eager["losses"], rel=1e-3)


def test_distributed_checkpoint_round_trip_of_device_tensors(job: dict[str, Any]) -> None:
    record = case(job, "dcp_roundtrip")
    assert record["checkpoint_io"] == "distributed"
    assert ".metadata" in record["files"]
    assert record["max_abs_difference"] == 0.0  # the +1 applied after the save is undone by the load
    assert record["parameter_devices"] == ["cuda:0"]
    assert record["remainder"] == {"step": 2}


def test_torch_compile_under_single_device_matches_eager_on_cuda() -> None:
    def body(lite: Lite, compile: bool) -> tuple[list[float], int, str]:
        torch.manual_seed(0)
        model: nn.Module = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
        if compile:
            model = torch.compile(model)  # type: ignore[assignment]
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        generator = torch.Generator().manual_seed(1)
        inputs = lite.to_device(torch.randn(16, 32, generator=generator))
        targets = lite.to_device(torch.randint(0, 4, (16,), generator=generator))
        losses = []
        for _ in range(5):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            lite.backward(loss)
            optimizer.step()
            losses.append(float(loss.detach()))
        graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        return losses, graphs, str(next(model.parameters()).device)

    torch._dynamo.reset()
    eager, _, _ = Lite(accelerator="cuda", devices=1).launch(body, False)
    compiled, graphs, device = Lite(accelerator="cuda", devices=1).launch(body, True)
    assert device == "cuda:0"
    assert graphs >= 1
    assert compiled == pytest.approx(eager, rel=1e-4)
    assert compiled[-1] < compiled[0]
