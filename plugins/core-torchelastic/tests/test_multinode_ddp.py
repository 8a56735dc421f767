"""Two nodes on one machine: two launcher invocations, node ranks 0 and 1, one DDP world on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TRAIN = Path(__file__).resolve().parents[2] / "core-slurm" / "tests" / "ddp_train_probe.py"


def clean_env() -> dict[str, str]:
    prefixes = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_", "LSB_", "JSM_")
    names = ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    return {name: value for name, value in os.environ.items() if not name.startswith(prefixes) and name not in names}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_two_nodes(command_for_node: list[list[str]]) -> list[dict[str, Any]]:
    nodes = [
        subprocess.Popen(command, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for command in command_for_node
    ]
    try:
        outputs = [node.communicate(timeout=200) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    reports = [json.loads(line) for out, _ in outputs for line in out.splitlines() if line.startswith("{")]
    return sorted(reports, key=lambda report: report["global_rank"])


def check_one_world(reports: list[dict[str, Any]], environment: str) -> None:
    keys = ("environment", "global_rank", "local_rank", "node_rank", "world_size")
    placement = [tuple(report[key] for key in keys) for report in reports]
    assert placement == [(environment, 0, 0, 0, 2), (environment, 1, 0, 1, 2)]
    assert {r["batches"] for r in reports} == {4}
    assert all(r["last_loss"] < r["first_loss"] / 10 for r in reports)
    assert reports[0]["digest"] == reports[1]["digest"]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_torchrun_nodes_train_one_ddp_world() -> None:
    port = str(free_port())
    reports = run_two_nodes([
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, str(TRAIN), "1", "2"]
        for node in (0, 1)
    ])
    check_one_world(reports, "torchelastic")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_core_run_nodes_train_one_ddp_world() -> None:
    port = str(free_port())
    reports = run_two_nodes([
        [sys.executable, "-m", "core.run", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "1",
         "--num-nodes", "2", "--node-rank", str(node), "--main-address", "127.0.0.1", "--main-port", port,
         str(TRAIN), "1", "2"]
        for node in (0, 1)
    ])
    check_one_world(reports, "local")
