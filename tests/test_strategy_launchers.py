"""The launchers of ``core.toolkit.strategies`` are objects holding their own state: no module globals, and the
``sys.excepthook`` a launch installs is the original again once the run ends; a second launch in the same process
works as the first. (A failing rank stopping the job is specified by core-ddp's tests: test_ddp_failures.py.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import job_environment

import core.toolkit.strategies
from core.toolkit.strategies import ExternalLauncher, Launcher, MultiprocessingLauncher, ScriptLauncher, failing

PACKAGE = Path(core.toolkit.strategies.__file__).parent


def test_no_module_of_the_package_rebinds_a_module_global() -> None:
    statements = [
        f"{path.name}:{node.lineno}"
        for path in sorted(PACKAGE.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Global)
    ]
    assert statements == []


def test_every_launcher_is_a_launcher_and_says_whether_a_notebook_can_use_it() -> None:
    assert issubclass(ScriptLauncher, Launcher) and issubclass(MultiprocessingLauncher, Launcher)
    assert ExternalLauncher("core-test", 0, 1).is_interactive_compatible


def test_an_external_launch_runs_the_function_and_puts_the_excepthook_back_at_the_end_of_the_run() -> None:
    original = sys.excepthook
    launcher = ExternalLauncher("core-test", 0, 1)
    seen = []

    def rank_function(value: int) -> int:
        seen.append(sys.excepthook is original)  # installed while the run lasts
        return value + 1

    for _ in range(2):  # a second launch in the same process works as the first
        assert launcher.launch(rank_function, 41) == 42
        launcher.end_run()  # what the strategy's teardown calls when the run ended normally
        assert sys.excepthook is original
    assert seen == [False, False]


def test_failing_is_true_only_while_an_exception_escapes_a_rank_function() -> None:
    observed: dict[str, bool] = {}

    def rank_function() -> None:
        observed["running"] = failing()
        try:
            raise ValueError("planned")
        finally:
            observed["escaping"] = failing()

    launcher = ExternalLauncher("core-test", 0, 1)
    with pytest.raises(ValueError, match="planned") as raised:
        launcher.launch(rank_function)
    assert observed == {"running": False, "escaping": True}
    assert "core-test: raised on global rank 0 of 1." in getattr(raised.value, "__notes__", [])
    try:
        raise RuntimeError("not in a rank function")
    except RuntimeError:
        assert not failing()
    launcher.end_run()


def test_a_launch_after_a_failed_one_installs_its_hook_over_the_original() -> None:
    original = sys.excepthook
    failed = ExternalLauncher("core-test", 0, 1)
    with pytest.raises(ZeroDivisionError):
        failed.launch(lambda: 1 / 0)
    assert sys.excepthook is not original  # the escaping exception would end the process through it
    again = ExternalLauncher("core-test", 0, 1)
    assert again.launch(lambda: "ok") == "ok"
    again.end_run()
    assert sys.excepthook is original


TWICE = """
import gc
import sys

import core

original = sys.excepthook


def work(lite, run):
    return float(lite.all_reduce(lite.global_rank + 1, reduce_op="sum").item())


if __name__ == "__main__":
    for run in range(2):
        lite = core.Lite(accelerator="cpu", strategy="{strategy}", devices=2)
        result = lite.launch(work, run)
        print(f"RUN {run} result={result} restored={sys.excepthook is original}", flush=True)
        del lite
        gc.collect()  # the first run's strategy and launcher are gone: the job's store must not go with them
"""


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_two_launches_in_one_script_both_work_and_leave_the_original_excepthook(tmp_path: Path, strategy: str) -> None:
    script = tmp_path / "twice.py"
    script.write_text(textwrap.dedent(TWICE.replace("{strategy}", strategy)))
    environment = job_environment(omp_threads=None)
    finished = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110,
                              cwd=tmp_path, env={**environment, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout + finished.stderr
    # Both ranks of ddp write to one pipe: lines may interleave, so find each report wherever it is.
    lines = sorted(re.findall(r"RUN \d result=[\d.]+ restored=(?:True|False)", finished.stdout))
    # ddp: both ranks run the script and print; ddp_spawn: only the caller prints (rank 0's result comes back).
    ranks = 2 if strategy == "ddp" else 1
    assert lines == sorted([f"RUN {run} result=3.0 restored=True" for run in range(2)] * ranks)
