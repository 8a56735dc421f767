"""The strategy kit: collectives on real processes, DDP equivalence, checkpoints, a clean end."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import pytest

from core._traits import traits_of
from core.testing._base import timeout
from core.testing._distributed import TEST_TIMEOUT, DistributedRunConformance
from core.testing._jobs import JobResult
from core.testing._worker import GLOBAL_BATCH, BarePrecision

BUILTIN_PRECISIONS: Final = ("32-true", "64-true", "16-true", "bf16-true")
"""The precisions ``core`` itself provides, under their canonical aliases."""


class StrategyConformance(DistributedRunConformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    One job of ``devices`` real processes (2 by default; 1 for ``max_processes = 1``) on the CPU over gloo,
    launched by the strategy itself, checks: ``all_reduce`` with each operation, ``all_gather`` shapes and
    values, ``broadcast`` of a dict from the first and the last rank, ``barrier``; that 2 ranks x batch 32
    train to the same weights as 1 process x batch 64 (``atol=1e-6``) and that the ranks agree bit for bit;
    a checkpoint round trip through ``Lite.save`` / ``Lite.load``; that each ``optimizer.step()`` steps the
    optimizer exactly once with a precision implementing no optional hook and with each built-in precision the
    strategy supports (:attr:`step_precisions`); and that the run ends cleanly: exit code 0, no process group
    alive, no process left. A strategy that is not data-parallel overrides ``test_ddp_equivalence`` with a skip
    saying why.
    """

    kind: ClassVar[str] = "strategy"
    cases: ClassVar[tuple[str, ...]] = ("collectives", "equivalence", "checkpoint", "optimizer_steps")
    equivalence_atol: ClassVar[float] = 1e-6
    step_precisions: ClassVar[tuple[str, ...] | None] = None
    """Precisions the step check runs under, one after the other in the same job; ``None``: ``"bare"`` (a
    precision implementing no optional hook) and every built-in precision that the strategy's ``supports``
    allows. Narrow it where a precision legitimately skips steps (a loss scaler's first overflows)."""

    def world_size(self) -> int:
        if self.devices is not None:
            return self.devices
        return 1 if traits_of(self.make_plugin(), self.kind).max_processes == 1 else 2

    def job_settings(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "strategy": self.reference(), "devices": self.world_size()}

    def job_inputs(self) -> dict[str, Any]:
        if self.step_precisions is not None:
            return {"step_precisions": list(self.step_precisions)}
        supports = traits_of(self.make_plugin(), self.kind).supports
        return {
            "step_precisions": [BarePrecision.name] + [
                alias for alias in BUILTIN_PRECISIONS if supports.allows("precision", alias)
            ]
        }

    @timeout(TEST_TIMEOUT)
    def test_each_optimizer_step_steps_once(self, job: JobResult) -> None:
        if "optimizer_steps" not in self.cases:
            pytest.skip(f"{type(self).__name__}.cases leaves out 'optimizer_steps'")
        for rank, result in self.results(job, "optimizer_steps").items():
            for precision, counted in result.items():
                what = (
                    "a precision implementing no optional hook ('bare')" if precision == BarePrecision.name
                    else f"precision={precision!r}"
                )
                assert counted["stepped"] == counted["taken"], (
                    f"with {what}, {counted['taken']} calls of optimizer.step() through the strategy stepped the "
                    f"optimizer {counted['stepped']} times on global rank {rank}, expected {counted['taken']}: "
                    + ("it skips steps" if counted["stepped"] < counted["taken"] else "it steps twice")
                    + ". A strategy implementing strategy_optimizer_step steps through "
                    "core.toolkit.strategies.optimizer_step(self.active, optimizer, **kwargs), never by calling "
                    "precision_optimizer_step itself"
                )

    @timeout(TEST_TIMEOUT)
    def test_ddp_equivalence(self, job: JobResult) -> None:
        results = self.results(job, "equivalence")
        reference = results[0]["reference"]
        per_rank = GLOBAL_BATCH // job.world_size
        for rank, result in results.items():
            for name, expected in reference.items():
                actual = result["parameters"][name]
                worst = max(abs(a - e) for a, e in zip(actual, expected, strict=True))
                assert worst <= self.equivalence_atol, (
                    f"after {result['steps']} steps, {job.world_size} rank(s) x batch {per_rank} differ from 1 "
                    f"process x batch {GLOBAL_BATCH} in {name!r} on global rank {rank} by {worst:.3g} "
                    f"(allowed {self.equivalence_atol})"
                )
            assert result["parameters"] == results[0]["parameters"], (
                f"global rank {rank}'s weights differ from global rank 0's: the ranks did not train in lockstep"
            )
