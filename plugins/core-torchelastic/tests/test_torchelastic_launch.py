"""The torchelastic environment under real torchrun (two nodes on one machine: test_multinode_ddp.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROBE = Path(__file__).resolve().parents[2] / "core-slurm" / "tests" / "environment_probe.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def clean_env() -> dict[str, str]:
    prefixes = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_", "LSB_", "JSM_")
    return {name: value for name, value in os.environ.items() if not name.startswith(prefixes)}


def reports(*outputs: str) -> list[dict[str, Any]]:
    """Every JSON report in the ranks' shared stdout. ``print`` writes a report and its newline separately, so
    two ranks printing at once can put both reports on one line; each report itself is one write."""
    decoder = json.JSONDecoder()
    found = []
    for output in outputs:
        index = output.find('{"')
        while index != -1:
            report, end = decoder.raw_decode(output, index)
            found.append(report)
            index = output.find('{"', end)
    return sorted(found, key=lambda report: report.get("global_rank", -1))


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_torchrun_two_workers_on_one_node() -> None:
    result = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(PROBE), "2", "1"],
        env=clean_env(), capture_output=True, text=True, timeout=100,
    )
    found = reports(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["environment"] for r in found] == ["torchelastic", "torchelastic"]
    assert [(r["global_rank"], r["local_rank"], r["node_rank"], r["world_size"]) for r in found] == [
        (0, 0, 0, 2), (1, 1, 0, 2),
    ]
    assert len({(r["main_address"], r["main_port"]) for r in found}) == 1
