"""The conformance kit can fail: run against deliberately broken plugins, it flags exactly their faults.

Each broken plugin is written into a temporary directory with a test module that subclasses a kit class,
and pytest runs it in a subprocess, as a plugin author's CI would. The JUnit report says which of the
kit's tests failed and why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

BROKEN_PLUGINS = '''
from core_ddp import DDPStrategy

from core import hookimpl
from core.builtin.checkpoint_io import TorchCheckpointIO, safe_torch_load


class LocalReduceStrategy(DDPStrategy):
    """DDP whose all-reduce forgets the other ranks: it returns this rank's own value."""

    def __init__(self) -> None:
        super().__init__(start_method="fork", name="local_reduce")

    @hookimpl
    def strategy_reduce(self, tensor, group, reduce_op):
        return tensor.clone()


class TrustingCheckpointIO(TorchCheckpointIO):
    """Loads whatever the file holds, ignoring weights_only."""

    name = "trusting"

    @hookimpl
    def checkpoint_io_load(self, path, map_location, weights_only):
        return safe_torch_load(path, map_location, weights_only=False)
'''

KIT_TESTS = '''
from core.testing import CheckpointIOConformance, StrategyConformance


class TestLocalReduce(StrategyConformance):
    plugin_factory = "broken_plugins:LocalReduceStrategy"


class TestTrusting(CheckpointIOConformance):
    plugin_factory = "broken_plugins:TrustingCheckpointIO"
'''

REDUCE_TESTS = {f"test_all_reduce[{op}]" for op in ("sum", "mean", "max", "min")} | {"test_all_reduce_integer_sum"}


def _outcomes(report: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(class, test) -> (outcome, message) from a JUnit XML report."""
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if problem is None else problem.tag
        message = "" if problem is None else (problem.get("message") or "") + "\n" + (problem.text or "")
        outcomes[(case.get("classname", "").rsplit(".", 1)[-1], case.get("name", ""))] = (outcome, message)
    return outcomes


@pytest.mark.timeout(420)
def test_the_kit_fails_a_strategy_whose_all_reduce_returns_the_local_value(tmp_path: Path) -> None:
    (tmp_path / "broken_plugins.py").write_text(textwrap.dedent(BROKEN_PLUGINS))
    (tmp_path / "test_broken_kit.py").write_text(textwrap.dedent(KIT_TESTS))
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", "test_broken_kit.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=400,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    outcomes = _outcomes(report)

    strategy = {name: outcome for (cls, name), outcome in outcomes.items() if cls == "TestLocalReduce"}
    failed = {name for name, (outcome, _) in strategy.items() if outcome == "failure"}
    assert failed == REDUCE_TESTS, result.stdout[-4000:]
    passed = {name for name, (outcome, _) in strategy.items() if outcome == "passed"}
    assert {
        "test_all_gather_shape_and_values", "test_broadcast_of_a_dict", "test_barrier_waits_for_every_rank",
        "test_ddp_equivalence", "test_checkpoint_round_trip", "test_clean_teardown",
    } <= passed
    assert (
        "all_reduce(reduce_op='sum') on global rank 0 of 2 returned [[1.0, -1.0, 0.0], [0.5, 1.0, 3.0]], "
        "expected [[3.0, -3.0, 10.0], [1.0, 3.0, 6.0]]"
    ) in strategy["test_all_reduce[sum]"][1]

    checkpoint = {name: outcome for (cls, name), outcome in outcomes.items() if cls == "TestTrusting"}
    failed = {name for name, (outcome, _) in checkpoint.items() if outcome == "failure"}
    assert failed == {"test_weights_only_refuses_code_without_running_it"}, result.stdout[-4000:]
    assert "loading with weights_only=True accepted a file holding arbitrary objects and ran code from the file" in (
        checkpoint["test_weights_only_refuses_code_without_running_it"][1]
    )


def test_import_core_does_not_import_the_kit() -> None:
    code = "import sys, core; core.Lite; print(sorted(name for name in sys.modules if name.startswith('core.testing')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr
