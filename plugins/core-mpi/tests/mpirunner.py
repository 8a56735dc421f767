"""Helpers of the core-mpi tests: commands under a real ``mpirun`` (openmpi-bin, from scripts/system-deps.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class MpiRun:
    """What an ``mpirun`` printed: the merged console output and each rank's own stdout, in rank order."""

    returncode: int
    stdout: str
    stderr: str
    ranks: list[str]

    def reports(self) -> list[dict[str, Any]]:
        """One JSON report per rank, read from each rank's own stdout (never from the merged console)."""
        return [json.loads(line) for output in self.ranks for line in output.splitlines() if line.startswith("{")]


def mpirun(
    processes: int, command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120,
    cwd: Path | None = None,
) -> MpiRun:
    """``mpirun -n processes command`` on this machine, as root if need be, with no scheduler variables.

    Open MPI forwards every rank's output to one console with no promise about where one rank's write ends,
    so the merged ``stdout`` can glue two ranks' lines together; ``--output-filename`` also keeps each
    rank's stdout in its own file, which is what tests read.
    """
    executable = require_mpirun()
    environment = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "MASTER_", "TORCHELASTIC_"))
    }
    # Open MPI refuses root unless told twice; --oversubscribe allows more ranks than this machine's 2 cores.
    environment.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    environment.update(env or {})
    with tempfile.TemporaryDirectory(prefix="core-mpirun-") as outputs:
        result = subprocess.run(
            [executable, "--oversubscribe", "--output-filename", outputs, "-n", str(processes), *command],
            env=environment, capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL,
        )
        # Open MPI 4 writes DIR/<job>/rank.<N>/stdout; a rank that printed nothing has no file.
        ranks = []
        for rank in range(processes):
            files = list(Path(outputs).glob(f"*/rank.{rank}/stdout"))
            ranks.append(files[0].read_text() if files else "")
    return MpiRun(result.returncode, result.stdout, result.stderr, ranks)
