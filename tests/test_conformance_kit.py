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


STEPPING_STRATEGIES = '''
from core import hookimpl
from core.toolkit.strategies import SingleDeviceStrategy


class HookCallingStrategy(SingleDeviceStrategy):
    """Steps by calling the precision's hook: nothing steps when the precision lacks it."""

    name = "hook_calling"

    @hookimpl
    def strategy_optimizer_step(self, optimizer, kwargs):
        return self.active.hook.precision_optimizer_step(optimizer=optimizer, kwargs=kwargs)


class SteppingAgainStrategy(SingleDeviceStrategy):
    """Reads the hook's None as "no precision stepped": steps again after a built-in precision did."""

    name = "stepping_again"

    @hookimpl
    def strategy_optimizer_step(self, optimizer, kwargs):
        result = self.active.hook.precision_optimizer_step(optimizer=optimizer, kwargs=kwargs)
        return optimizer.step(**kwargs) if result is None else result
'''

STEPPING_TESTS = '''
from typing import ClassVar

from core.testing import StrategyConformance


class TestHookCalling(StrategyConformance):
    plugin_factory = "stepping_strategies:HookCallingStrategy"
    cases: ClassVar[tuple[str, ...]] = ("optimizer_steps",)


class TestSteppingAgain(StrategyConformance):
    plugin_factory = "stepping_strategies:SteppingAgainStrategy"
    cases: ClassVar[tuple[str, ...]] = ("optimizer_steps",)
'''


@pytest.mark.timeout(300)
def test_the_kit_fails_a_strategy_that_skips_or_doubles_optimizer_steps(tmp_path: Path) -> None:
    (tmp_path / "stepping_strategies.py").write_text(textwrap.dedent(STEPPING_STRATEGIES))
    (tmp_path / "test_stepping_kit.py").write_text(textwrap.dedent(STEPPING_TESTS))
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", "test_stepping_kit.py",
         "-k", "steps_once"],
        cwd=tmp_path, capture_output=True, text=True, timeout=280,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    outcomes = _outcomes(report)
    skipping = outcomes[("TestHookCalling", "test_each_optimizer_step_steps_once")]
    doubling = outcomes[("TestSteppingAgain", "test_each_optimizer_step_steps_once")]
    assert skipping[0] == doubling[0] == "failure", result.stdout[-4000:]
    assert (
        "with a precision implementing no optional hook ('bare'), 2 calls of optimizer.step() through the strategy "
        "stepped the optimizer 0 times on global rank 0, expected 2: it skips steps"
    ) in skipping[1]
    assert "core.toolkit.strategies.optimizer_step(self.active, optimizer, **kwargs)" in skipping[1]
    # 'bare' passes for the doubling strategy (no hook: None, it steps once); the first built-in fails it.
    assert (
        "with precision='32-true', 2 calls of optimizer.step() through the strategy stepped the optimizer 4 times "
        "on global rank 0, expected 2: it steps twice"
    ) in doubling[1]
