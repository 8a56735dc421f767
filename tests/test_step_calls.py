"""Lite's per-step overhead as a count of Python-level calls (bench/overhead_worker.calls_per_step).

Wall-clock ratios on this 2-core machine move by 2 % between runs of the same code, more than the overhead
they are meant to guard; the number of Python functions and builtins a step runs does not move at all. A change
that adds work to Lite's step (a hook call, a wrapper, a check) fails here and says how many calls it added.
"""

from __future__ import annotations

import pytest

from bench.overhead_worker import calls_per_step
from bench.step_calls import ADDED_CALLS_AT_B63BBCA

BUDGET = ADDED_CALLS_AT_B63BBCA + 3
"""34 calls at b63bbca; 37 since the tensor walker keeps tied tensors tied (one call into it, one ``id()`` per
tensor of the batch). Raise it only for work a step must do, and say what in the commit."""


@pytest.mark.timeout(120)
def test_lite_adds_a_fixed_small_number_of_calls_per_step() -> None:
    counted = calls_per_step(30)
    added = counted["lite"] - counted["raw"]
    assert counted["raw"] > 100, counted  # the raw step itself is counted (the profiler saw it)
    assert added == int(added), f"the count differs between steps: {counted}"
    assert 0 < added <= BUDGET, (
        f"Lite's step runs {added:g} Python-level calls more than the raw loop's (budget {BUDGET}): {counted}"
    )
