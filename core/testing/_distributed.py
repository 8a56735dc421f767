"""Checks that need a real run: one job of real processes per test class, shared by its tests.

The job runs :mod:`core.testing._worker` in a fresh interpreter, the way a user runs a script, so the
strategy launches its processes with its own launcher (re-running the script, spawning or forking). Each
test reads one part of what the ranks recorded. The job has a hard timeout that kills every process of
it, and each test carries a pytest-timeout mark, so a hang fails instead of stalling the suite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import pytest

from core.testing._base import Conformance, caller_python_path, first_failure, timeout
from core.testing._jobs import JobResult, run_job
from core.testing._worker import BARRIER_DELAY, REDUCE_OPS

JOB_TIMEOUT: Final = 240.0
"""Seconds a conformance job may take before it is killed (it usually takes 10 to 30)."""

TEST_TIMEOUT: Final = JOB_TIMEOUT + 60.0

# One job per test class, started by the first test that needs it.
_jobs: dict[type, JobResult] = {}


def expected_reduction(op: str, world_size: int) -> list[list[float]]:
    """What ``all_reduce`` of the collectives case must return on every rank."""
    per_rank = [
        [[rank + 1.0, -(rank + 1.0), 10.0 * rank], [0.5, 2.0**rank, 3.0]] for rank in range(world_size)
    ]

    def combine(values: list[float]) -> float:
        if op == "sum":
            return sum(values)
        if op == "mean":
            return sum(values) / world_size
        return max(values) if op == "max" else min(values)

    return [
        [combine([per_rank[rank][row][column] for rank in range(world_size)]) for column in range(3)]
        for row in range(2)
    ]


def _close(actual: Sequence[Any], expected: Sequence[Any], atol: float) -> bool:
    flat_actual, flat_expected = _flatten(actual), _flatten(expected)
    return len(flat_actual) == len(flat_expected) and all(
        math.isclose(a, e, rel_tol=0.0, abs_tol=atol) for a, e in zip(flat_actual, flat_expected, strict=True)
    )


def _flatten(values: Any) -> list[float]:
    if isinstance(values, (list, tuple)):
        return [item for value in values for item in _flatten(value)]
    return [float(values)]


class DistributedRunConformance(Conformance):
    """A job of ``devices`` processes on ``accelerator`` running the cases in :attr:`cases`.

    The base of :class:`StrategyConformance` and :class:`ExtensionConformance`: its settings point the kit at
    a device. On CPU the defaults need no change; on real hardware set them in your ``Test...`` class::

        class TestDDPOnMyDevice(StrategyConformance):
            alias = "ddp"
            accelerator = "mydevice"   # the installed accelerator alias
            devices = 2                # one process per device
    """

    accelerator: ClassVar[str] = "cpu"
    """The accelerator alias of the job: every process computes on the device this accelerator returns."""
    devices: ClassVar[int | None] = None
    """Processes in the job; ``None``: 2, or 1 for a strategy with ``max_processes = 1``."""
    cases: ClassVar[tuple[str, ...]] = ()
    """The cases the job runs (a subclass narrows what its tests need; the kit class sets them)."""
    job_timeout: ClassVar[float] = JOB_TIMEOUT
    """Seconds the whole job may take before it is killed and its tests fail (raise it for a slow device)."""
    launcher: ClassVar[tuple[str, ...]] = ()
    """A command that starts the job's ranks itself, put before the kit's ``python -m`` command for a rank
    (``("horovodrun", "-np", "2", "-H", "localhost:2", "--gloo")``); empty: the strategy launches them."""

    def job_settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def job_inputs(self) -> dict[str, Any]:
        """What the cases read from the job's spec besides the settings of ``Lite`` (JSON data)."""
        return {}

    def world_size(self) -> int:
        raise NotImplementedError

    @pytest.fixture
    def job(self, tmp_path_factory: pytest.TempPathFactory) -> JobResult:
        cls = type(self)
        if cls not in _jobs:
            directory = tmp_path_factory.mktemp(f"conformance-{cls.__name__}")
            spec = {
                "settings": self.job_settings(), "cases": list(self.cases), "world_size": self.world_size(),
                **self.job_inputs(),
            }
            _jobs[cls] = run_job(
                spec, directory, self.job_timeout, caller_python_path(), launcher=tuple(self.launcher)
            )
        return _jobs[cls]

    @staticmethod
    def results(job: JobResult, case: str) -> dict[int, Any]:
        """Every rank's record of ``case``; fails the test with the job's output when one is missing."""
        failure = first_failure(job.ranks, case)
        if failure is not None:
            pytest.fail(f"the case {case!r} raised on {failure}\n{job.describe()}", pytrace=False)
        found = {rank: report["cases"].get(case) for rank, report in job.ranks.items()}
        missing = [rank for rank in range(job.world_size) if found.get(rank) is None]
        if missing:
            pytest.fail(f"global rank(s) {missing} did not report the case {case!r}: {job.describe()}", pytrace=False)
        return {rank: found[rank]["result"] for rank in range(job.world_size)}

    # ---------------------------------------------------------------------------------------------
    # Collectives, through Lite as a user calls them
    # ---------------------------------------------------------------------------------------------

    @timeout(TEST_TIMEOUT)
    @pytest.mark.parametrize("op", REDUCE_OPS)
    def test_all_reduce(self, job: JobResult, op: str) -> None:
        expected = expected_reduction(op, job.world_size)
        for rank, result in self.results(job, "collectives").items():
            actual = result["reduced"][op]
            assert _close(actual, expected, 1e-6), (
                f"all_reduce(reduce_op={op!r}) on global rank {rank} of {job.world_size} returned {actual}, "
                f"expected {expected}"
            )

    @timeout(TEST_TIMEOUT)
    def test_all_reduce_integer_sum(self, job: JobResult) -> None:
        expected = [sum(rank + 1 for rank in range(job.world_size)), 7 * job.world_size]
        for rank, result in self.results(job, "collectives").items():
            assert result["integer_sum"]["values"] == expected, (
                f"all_reduce of an int64 tensor with 'sum' on global rank {rank} returned "
                f"{result['integer_sum']}, expected {expected}"
            )

    @timeout(TEST_TIMEOUT)
    def test_all_gather_shape_and_values(self, job: JobResult) -> None:
        world_size = job.world_size
        expected = [[[float(rank), rank + 0.5, -float(rank)]] for rank in range(world_size)]
        for rank, result in self.results(job, "collectives").items():
            gathered = result["gathered"]
            assert gathered["shape"] == [world_size, 1, 3], (
                f"all_gather of a (1, 3) tensor on global rank {rank} has shape {gathered['shape']}, expected "
                f"[{world_size}, 1, 3] (world size first)"
            )
            assert _close(gathered["values"], expected, 0.0), (
                f"all_gather on global rank {rank} returned {gathered['values']}, expected {expected}"
            )

    @timeout(TEST_TIMEOUT)
    def test_broadcast_of_a_dict(self, job: JobResult) -> None:
        last = job.world_size - 1
        for rank, result in self.results(job, "collectives").items():
            for key, source in (("broadcast_from_first", 0), ("broadcast_from_last", last)):
                expected = {
                    "type": "dict",
                    "rank": source,
                    "tensor": [0, source + 1, 2 * (source + 1)],
                    "nested": {"items": [source, "text"]},
                }
                assert result[key] == expected, (
                    f"broadcast(src={source}) of a dict on global rank {rank} gave {result[key]}, expected {expected}"
                )

    @timeout(TEST_TIMEOUT)
    def test_barrier_waits_for_every_rank(self, job: JobResult) -> None:
        if job.world_size == 1:
            pytest.skip("one process: nobody to wait for")
        last = job.world_size - 1
        for rank, result in self.results(job, "collectives").items():
            if rank == last:
                continue
            assert result["barrier_waited"] >= BARRIER_DELAY / 2, (
                f"global rank {rank} left barrier() after {result['barrier_waited']:.3f} s although rank {last} "
                f"reached it {BARRIER_DELAY} s later"
            )

    # ---------------------------------------------------------------------------------------------
    # Checkpoints and the end of the run
    # ---------------------------------------------------------------------------------------------

    @timeout(TEST_TIMEOUT)
    def test_checkpoint_round_trip(self, job: JobResult) -> None:
        for rank, result in self.results(job, "checkpoint").items():
            assert result["exists_after_save"], f"global rank {rank}: the checkpoint did not exist after save()"
            assert result["restored"] == result["saved"], f"global rank {rank}: load() did not restore the module"
            assert result["restored_momentum"] == result["saved_momentum"], (
                f"global rank {rank}: load() did not restore the optimizer's state"
            )
            assert result["remainder"] == {"step": 7}, (
                f"global rank {rank}: load() returned {result['remainder']} for the entries not restored, "
                f"expected {{'step': 7}}"
            )
            # Engines that own the optimizer (DeepSpeed) keep its state in their own files, so a plain read
            # of the checkpoint promises the module and the plain values only.
            assert {"model", "step"} <= set(result["keys"]), (
                f"global rank {rank}: load(path) without a state returned the keys {result['keys']}; expected "
                f"at least 'model' and 'step'"
            )

    @timeout(TEST_TIMEOUT)
    def test_clean_teardown(self, job: JobResult) -> None:
        assert not job.timed_out, job.describe()
        assert job.returncode == 0, job.describe()
        if self.launcher:  # ranks started by an outside launcher: each of them returns from launch()
            assert len(job.after_launch) == job.world_size, (
                f"{job.world_size - len(job.after_launch)} rank(s) never returned from launch(): {job.describe()}"
            )
        else:
            assert job.launcher_pid in job.after_launch, (
                f"the launching process never returned from launch(): {job.describe()}"
            )
        alive = [pid for pid, report in job.after_launch.items() if report["process_group_initialized"]]
        assert not alive, f"processes {alive} still had a process group after launch() returned"
        assert not job.leftovers, f"processes {list(job.leftovers)} of the job were still running after it ended"
        assert "terminate called" not in job.stderr, job.describe()

