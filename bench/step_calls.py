"""Step overhead as a count: the Python-level calls Lite adds to each step of the raw loop (single process).

Wall-clock ratios on a 2-core machine move by about 2 % between runs of the same code, more than the overhead they
are meant to show; the number of Python functions and builtins a step runs (``sys.setprofile``) does not move at
all. ``bench/overhead_worker.calls_per_step`` counts both loops in one process; tests/test_step_calls.py keeps
what Lite adds under a budget.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench._harness import Result

ADDED_CALLS_AT_B63BBCA = 34
"""Python-level calls Lite added per step (single process) at b63bbca, before the architecture work of issue 33."""


def run(steps: int) -> list[Result]:
    code = f"import json; from bench.overhead_worker import calls_per_step; print(json.dumps(calls_per_step({steps})))"
    counted = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                        text=True).stdout.strip().splitlines()[-1])
    added = counted["lite"] - counted["raw"]
    return [Result(
        "Python-level calls per step, Lite vs raw loop (single process)", counted["lite"], counted["raw"], "calls",
        f"what Lite adds stays within 3 of b63bbca's {ADDED_CALLS_AT_B63BBCA}",
        met=added <= ADDED_CALLS_AT_B63BBCA + 3,
        note=f"Lite adds {added:g} calls per step (functions and the builtins they call, counted with "
             f"sys.setprofile over {steps} steps; a count, so the machine's load does not move it): 34 at b63bbca, "
             f"37 since the tensor walker keeps tied tensors tied (one call into it, one id() per tensor of the "
             f"batch)",
    )]
