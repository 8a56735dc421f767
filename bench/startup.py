"""Start-up: importing core, listing plugins (with 0, 100 and 200 synthetic distributions), resolving."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._harness import Result, alternate, time_command
from bench._synthetic import env_with, install_synthetic

PY = sys.executable

RESOLVE_PROBE = """
import json, sys, time
import torch  # imported first: its cost is not resolution's
import core, core.registry._resolver
start = time.perf_counter()
active = core.resolve(plugins=["synthetic_7"])
first = time.perf_counter() - start
imported = sorted(m for m in sys.modules if m.startswith("core_synthetic_"))
later = []
for _ in range(5):  # the median of later calls: one may include a full garbage collection of torch's heap
    start = time.perf_counter()
    core.resolve(plugins=["synthetic_7"])
    later.append(time.perf_counter() - start)
print(json.dumps({"seconds": first, "again": sorted(later)[2], "imported": imported}))
"""


def import_core(repetitions: int) -> Result:
    torch_s, core_s, _, _ = alternate(
        lambda: time_command([PY, "-c", "import torch"]), lambda: time_command([PY, "-c", "import core"]), repetitions
    )
    return Result(
        "python -c 'import core' vs 'import torch'", core_s, torch_s, "s", "torch not imported (ratio << 1)",
        met=core_s < torch_s / 4,
    )


def listing(repetitions: int, counts: tuple[int, ...] = (100, 200)) -> list[Result]:
    """``python -m core.plugins`` with the installed plugins, then with extra synthetic distributions."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        plain = [PY, "-m", "core.plugins"]
        for count in counts:
            site = Path(tmp) / f"site{count}"
            install_synthetic(site, count)
            env = env_with(site)

            def with_synthetic(env: dict[str, str] = env) -> float:
                return time_command(plain, env=env)

            base_s, many_s, _, _ = alternate(lambda: time_command(plain), with_synthetic, repetitions)
            torch_loaded = subprocess.run(
                [PY, "-X", "importtime", "-m", "core.plugins"], env=env, capture_output=True, text=True, check=True
            ).stderr
            imported_torch = any(line.rstrip().endswith(" torch") for line in torch_loaded.splitlines())
            results.append(
                Result(
                    f"python -m core.plugins, +{count} synthetic distributions (baseline: installed only)",
                    many_s, base_s, "s", "< 0.3 s, linear growth, no torch import",
                    met=many_s < 0.3 and not imported_torch,
                    note="torch imported!" if imported_torch else "",
                )
            )
    return results


def resolution(repetitions: int) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        install_synthetic(site, 100)
        env = env_with(site)
        samples = []
        warm = []
        imported: list[str] = []
        for _ in range(repetitions):
            out = subprocess.run([PY, "-c", RESOLVE_PROBE], env=env, capture_output=True, text=True, check=True)
            record = json.loads(out.stdout)
            samples.append(record["seconds"])
            warm.append(record["again"])
            imported = record["imported"]
    median, warm_median = statistics.median(samples), statistics.median(warm)
    return Result(
        "first resolve(plugins=['synthetic_7']) in a process, 100 synthetic plugins installed",
        median, None, "s", "< 50 ms, only the selected plugin imported",
        met=median < 0.05 and imported == ["core_synthetic_7"],
        note=f"plugin modules imported: {imported}; a second resolve in the same process: "
        f"{warm_median * 1000:.1f} ms (median of 5)",
    )


def run(repetitions: int) -> list[Result]:
    return [import_core(repetitions), *listing(repetitions), resolution(repetitions)]
