"""Helpers of the core-mpi tests: commands under a real ``mpirun`` (openmpi-bin, from scripts/system-deps.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "core-slurm" / "tests" / "environment_probe.py"


def require_mpirun() -> str:
    """The path of mpirun; skip (fail on CI) when it is not installed."""
    path = shutil.which("mpirun")
    if path is not None:
        return path
    reason = "mpirun is not installed; install it with: scripts/system-deps.sh (apt-get install openmpi-bin)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)


def mpirun(
    processes: int, command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``mpirun -n processes command`` on this machine, as root if need be, with no scheduler variables."""
    executable = require_mpirun()
    environment = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_"))
    }
    # Open MPI refuses root unless told twice; --oversubscribe allows more ranks than this machine's 2 cores.
    environment.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    environment.update(env or {})
    return subprocess.run(
        [executable, "--oversubscribe", "-n", str(processes), *command],
        env=environment, capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL,
    )


def json_reports(output: str) -> list[dict[str, object]]:
    """Every JSON object in a job's merged output: ranks print at once, so two objects can share a line."""
    import json

    decoder = json.JSONDecoder()
    reports = []
    index = output.find('{"')
    while index != -1:
        report, end = decoder.raw_decode(output, index)
        reports.append(report)
        index = output.find('{"', end)
    return reports
