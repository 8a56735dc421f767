"""Every way of starting a DDP job gives 2 ranks that train together: the script run directly (it starts its own
second rank), ``python -m`` of a module, ``ddp_spawn`` and ``ddp_fork`` (rank 0's return value comes back to the
caller), ``python -m core.run`` and ``torchrun``; plus the demo of the README trained on 2 processes."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.distributed]

BOTH_RANKS = ["RESULT rank=0 world=2 returned=0/2", "RESULT rank=1 world=2 returned=1/2"]
JOB = ("--strategy", "ddp", "--steps", "3")


def results(stdout: str) -> list[str]:
    return sorted(re.findall(r"RESULT rank=\d+ world=\d+ returned=\S+", stdout))


@pytest.mark.timeout(60)
def test_a_script_run_directly_starts_its_second_rank_once(jobs) -> None:  # type: ignore[no-untyped-def]
    finished = jobs.run(jobs.script("ddp_job.py", *JOB, "--repeat", "2"))  # two Lites, one after the other
    assert finished.returncode == 0, finished.output
    assert results(finished.stdout) == sorted(BOTH_RANKS * 2)
    assert finished.leftovers == []


@pytest.mark.timeout(60)
def test_a_module_run_with_python_m_is_started_again_with_python_m(jobs) -> None:  # type: ignore[no-untyped-def]
    finished = jobs.run([sys.executable, "-m", "ddp_job", *JOB])
    assert finished.returncode == 0, finished.output
    assert results(finished.stdout) == BOTH_RANKS


@pytest.mark.timeout(60)
def test_launch_without_a_function_lets_each_rank_run_the_rest_of_the_script(jobs) -> None:  # type: ignore[no-untyped-def]
    finished = jobs.run(jobs.script("ddp_job.py", *JOB, "--no-function"))
    assert finished.returncode == 0, finished.output
    assert results(finished.stdout) == BOTH_RANKS


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_multiprocessing_strategies_return_rank_zeros_result(jobs, strategy: str) -> None:  # type: ignore[no-untyped-def]
    finished = jobs.run(jobs.script("ddp_job.py", "--strategy", strategy, "--steps", "3"))
    assert finished.returncode == 0, finished.output
    # Only the caller prints, with the value its rank 0 returned; the ranks ran in processes of their own.
    assert results(finished.stdout) == ["RESULT rank=0 world=2 returned=0/2"]
    assert finished.leftovers == []


@pytest.mark.timeout(60)
def test_core_run_starts_one_process_per_device(jobs) -> None:  # type: ignore[no-untyped-def]
    command = [sys.executable, "-m", "core.run", "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2",
               *jobs.script("ddp_job.py", *JOB)[1:]]
    finished = jobs.run(command)
    assert finished.returncode == 0, finished.output
    assert results(finished.stdout) == BOTH_RANKS


@pytest.mark.timeout(60)
def test_core_run_refuses_an_unknown_strategy_before_starting_anything(jobs) -> None:  # type: ignore[no-untyped-def]
    finished = jobs.run([sys.executable, "-m", "core.run", "--strategy", "dpp", "--devices", "2", "x.py"])
    assert finished.returncode == 2
    assert "core.run: error: Unknown strategy 'dpp'. Did you mean " in finished.stderr
    assert "'ddp'?" in finished.stderr or "'ddp' or" in finished.stderr


@pytest.mark.timeout(60)
def test_torchrun_starts_the_ranks_and_the_strategy_launches_nothing(jobs) -> None:  # type: ignore[no-untyped-def]
    from core.toolkit import find_free_port

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None
    command = [torchrun, "--nproc-per-node", "2", "--master-port", str(find_free_port()),
               *jobs.script("ddp_job.py", *JOB)[1:]]
    finished = jobs.run(command)
    assert finished.returncode == 0, finished.output
    assert results(finished.stdout) == BOTH_RANKS


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_digits_demo_trains_on_two_processes_to_95_percent(jobs) -> None:  # type: ignore[no-untyped-def]
    example = Path(__file__).resolve().parents[3] / "examples" / "digits.py"
    finished = jobs.run([sys.executable, str(example), "--accelerator", "cpu", "--strategy", "ddp", "--devices", "2"],
                        timeout=170)
    assert finished.returncode == 0, finished.output
    assert re.search(r"strategy\s+ddp\s", finished.stdout)
    accuracy = re.findall(r"^test accuracy: (\d\.\d{4})$", finished.stdout, flags=re.MULTILINE)
    assert len(accuracy) == 1 and float(accuracy[0]) >= 0.95, finished.stdout


@pytest.mark.timeout(180)
def test_ddp_spawn_gives_each_rank_its_own_copy_of_a_module_argument() -> None:
    """torch.multiprocessing shares CPU tensors between processes; a step must still land once, not per rank."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "scripts" / "spawn_module_argument.py"
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=170,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    weights = json.loads(result.stdout.strip().splitlines()[-1])["weights"]
    # d(sum(x @ w))/dw = 4 for each weight (4 rows of ones), lr 0.5: one step takes 1.0 to -1.0 exactly once.
    assert weights == [-1.0, -1.0, -1.0]
