"""The strategy kit: collectives on real processes, DDP equivalence, checkpoints, a clean end."""

from __future__ import annotations

from typing import Any, ClassVar

from core._traits import traits_of
from core.testing._base import timeout
from core.testing._distributed import TEST_TIMEOUT, DistributedRunConformance
from core.testing._jobs import JobResult
from core.testing._worker import GLOBAL_BATCH


class StrategyConformance(DistributedRunConformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    One job of ``devices`` real processes (2 by default; 1 for ``max_processes = 1``) on the CPU over gloo,
    launched by the strategy itself, checks: ``all_reduce`` with each operation, ``all_gather`` shapes and
    values, ``broadcast`` of a dict from the first and the last rank, ``barrier``; that 2 ranks x batch 32
    train to the same weights as 1 process x batch 64 (``atol=1e-6``) and that the ranks agree bit for bit;
    a checkpoint round trip through ``Lite.save`` / ``Lite.load``; and that the run ends cleanly: exit code
    0, no process group alive, no process left. A strategy that is not data-parallel overrides
    ``test_ddp_equivalence`` with a skip saying why.
    """

    kind: ClassVar[str] = "strategy"
    cases: ClassVar[tuple[str, ...]] = ("collectives", "equivalence", "checkpoint")
    equivalence_atol: ClassVar[float] = 1e-6

    def world_size(self) -> int:
        if self.devices is not None:
            return self.devices
        return 1 if traits_of(self.make_plugin(), self.kind).max_processes == 1 else 2

    def job_settings(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "strategy": self.reference(), "devices": self.world_size()}

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
