"""A finished job tears down in order (barrier, then destroy the process group), so no process aborts at exit.

Gloo aborts a process whose process group is freed during interpreter shutdown ("terminate called without an
active exception", status -6). So each rank also checks that its group was freed at teardown, although the
script still holds the model that DistributedDataParallel wrapped.

The launching process is rank 0 and waits for its child rank at exit; a child that exits non-zero (or aborts
with -6, as gloo does when a process group is left alive) makes the launcher exit 1. So one status of 0 per run
means every process of the run exited 0.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.distributed]

# Five runs here; `make stress` repeats this file (and every multi-process file) ten times on top. Twenty runs
# in the suite cost CI 164 s.
RUNS = 5


@pytest.mark.slow
@pytest.mark.timeout(900)  # each run has its own 60 s limit
def test_consecutive_two_process_runs_all_exit_zero(jobs) -> None:  # type: ignore[no-untyped-def]
    problems = []
    for run in range(RUNS):
        finished = jobs.run(jobs.script("ddp_job.py", "--strategy", "ddp", "--steps", "1"), timeout=60)
        if (
            finished.returncode != 0
            or "terminate called" in finished.stderr
            or "Traceback" in finished.stderr
            or finished.stdout.count("RESULT") != 2
            or finished.stdout.count("freed=True") != 2
            or finished.leftovers
        ):
            problems.append(f"run {run}: status {finished.returncode}, left {finished.leftovers}\n{finished.output}")
    assert problems == [], "\n\n".join(problems)
