"""scripts/gpu_check.py (``make gpu-check``) and bench/gpu_gpt.py on this CPU machine, so neither rots between GPU runs.

The dry run installs core and the plugins the GPU checks use into a temporary target exactly as the GPU machine
does (``--no-deps --no-build-isolation``, nothing fetched), collects the tests marked ``gpu`` against that target
and lists the benchmark's configurations. The benchmark itself runs at a tiny size on the CPU (eager and fsdp world
size 1 over gloo; compiling on this machine would take minutes). What this does not cover: anything on a GPU (CUDA,
NCCL, the timings), which only ``make gpu-check`` on the GPU machine exercises.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_plan_fits_eight_minutes_with_a_budget_per_phase(gpu_check: ModuleType) -> None:
    assert [phase.name for phase in gpu_check.PLAN] == ["install", "tests", "bench"]
    assert all(phase.budget_s > 0 for phase in gpu_check.PLAN)
    assert gpu_check.planned_total() <= gpu_check.LIMIT_S == 480.0


def test_a_phase_is_killed_with_its_children_at_its_budget(gpu_check: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    program = ("import subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
               f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
               "print('started', flush=True)\n"
               "time.sleep(120)\n")
    log = tmp_path / "phase.log"
    status, seconds = gpu_check.run_phase([sys.executable, "-c", program], dict(os.environ), 3.0, log)
    assert status is None
    assert seconds < 30
    assert "killed at the phase budget of 3 s" in log.read_text()
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        # A killed child of a live process stays a zombie until reaped; /proc says which.
        state = Path(f"/proc/{grandchild}/stat")
        if state.exists() and state.read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the phase's grandchild {grandchild} outlived the phase")


def test_junit_summary_names_each_failure_with_its_message(gpu_check: ModuleType, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="3" failures="1" errors="0" skipped="1" time="2.5">'
        '<testcase classname="tests.gpu.test_x" name="test_ok" time="0.5"/>'
        '<testcase classname="tests.gpu.test_x" name="test_bad" time="1.0"><failure message="assert 1 == 2"/>'
        '</testcase><testcase classname="tests.gpu.test_x" name="test_skip" time="0.0">'
        '<skipped message="needs a CUDA device"/></testcase></testsuite></testsuites>')
    lines = gpu_check.junit_summary(junit)
    assert lines[0] == "3 tests: 1 passed, 1 failed, 0 errors, 1 skipped (2.5 s)"
    assert "FAILURE tests.gpu.test_x::test_bad (1.0 s): assert 1 == 2" in lines
    assert "SKIPPED tests.gpu.test_x::test_skip (0.0 s): needs a CUDA device" in lines
    assert gpu_check.junit_summary(tmp_path / "absent.xml")[0].startswith("no JUnit file")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dry_run_installs_into_a_temporary_target_and_lists_what_it_would_run(tmp_path: Path) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=850, env=environment)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "of the 480 s limit (8 minutes)" in result.stdout
    summary = (tmp_path / "gpu-check-summary.md").read_text()
    for phase in ("install", "tests", "bench"):
        assert f"| {phase} | ok |" in summary, summary
    assert "installed: core 0.1.0, core-cuda 0.1.0, core-amp 0.1.0" in summary
    count = int(summary.split("would run ")[1].split(" tests")[0])
    assert count >= 25
    for test in ("test_gpu_precision.py::test_16_mixed_skips_a_step_with_an_inf_gradient_and_halves_the_scale",
                 "test_gpu_strategies.py::test_ddp_world_size_1_trains_over_nccl",
                 "test_gpu_trainer.py::test_the_digits_demo_reaches_95_percent_through_the_trainer_on_the_gpu"):
        assert f"tests/gpu/{test}" in summary
    for configuration in ("eager/raw", "eager/lite", "eager/fabric", "eager/accelerate", "fsdp/lite_fsdp",
                          "compiled/raw", "compiled/lite"):
        assert f"  {configuration}" in summary
    assert "124.5 M parameters" in summary
    # Only what --out names is written there: the target and the build are temporary.
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "gpu-bench.log", "gpu-check-summary.md", "gpu-install.log", "gpu-tests.log"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_gpu_benchmark_runs_at_a_tiny_size_on_the_cpu(tmp_path: Path) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "bench.gpu_gpt", "--tiny", "--device", "cpu", "--sections",
                             "eager,fsdp", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                            timeout=550, env=environment)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    results = json.loads((tmp_path / "gpu-results.json").read_text())
    measured = {(row["section"], row["runner"]): row for row in results["rows"]}
    assert {("eager", "raw"), ("eager", "lite"), ("fsdp", "raw"), ("fsdp", "lite_fsdp"), ("fsdp", "fsdp2"),
            ("fsdp", "lite_fsdp_ac"), ("fsdp", "lite_fsdp_ac_2x")} <= set(measured)
    for row in measured.values():
        assert row["tokens_per_s"] > 0 and row["step_ms"] > 0
        assert len(row["block_ms_per_step"]) == results["plan"]["rounds"]
    names = {comparison["name"] for comparison in results["comparisons"]}
    assert {"eager: lite vs raw, tokens/s", "fsdp: lite_fsdp vs raw, tokens/s",
            "fsdp: lite_fsdp vs hand-written FSDP2 (same MixedPrecisionPolicy), tokens/s",
            "fsdp: lite_fsdp_ac_2x vs lite_fsdp, tokens/s"} <= names
    for peer, module in (("fabric", "lightning"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            assert {"config": f"eager/{peer}", "reason": f"{module} is not importable here"} in results["skipped"]
        else:
            assert ("eager", peer) in measured
    assert results["model"]["layers"] == 2 and results["versions"]["torch"]
    assert "| section | runner | tokens/s | step (ms) | peak memory (GiB) | MFU |" in (
        tmp_path / "gpu-results.md").read_text()
