"""``make stress``: run every multi-process test file N times, then many 2-process ddp jobs at once.

Not part of ``make test``: it takes a long time on purpose. It prints, per test, how many of its runs
failed, and for the concurrent jobs how many of them failed, so that a flaky test shows up as a number rather
than as a red CI run once in a while. A test file counts as multi-process when it is marked ``distributed``.

    python scripts/stress.py --repeat 10                 # every multi-process file, 10 times each
    python scripts/stress.py --repeat 3 --only ddp       # files whose path contains "ddp"
    python scripts/stress.py --repeat 0 --jobs 8 --rounds 5   # only the concurrent jobs
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB_SCRIPT = ROOT / "plugins" / "core-ddp" / "tests" / "scripts" / "rendezvous_job.py"
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "LOCAL_WORLD_SIZE", "CORE_DDP_JOB")


def multi_process_files(only: str | None) -> list[Path]:
    """Test files that start several processes: marked ``distributed``, or running the kit's strategy jobs."""
    candidates = sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("plugins/*/tests/**/test_*.py"),
                         *ROOT.glob("contrib/*/tests/**/test_*.py")])
    markers = ("mark.distributed", "StrategyConformance", "ExtensionConformance")  # the kit's jobs are real too
    return [path for path in candidates
            if any(marker in path.read_text() for marker in markers) and (only is None or only in str(path))]


def clean_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}


def run_file(path: Path, report: Path, timeout: float) -> tuple[dict[str, bool], str]:
    """Run one test file once; return each test's outcome (True: passed or skipped) and a failure note."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               f"--junitxml={report}", str(path)]
    try:
        subprocess.run(command, cwd=ROOT, env=clean_environment(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, f"the file did not finish within {timeout:.0f} s"
    if not report.exists():
        return {}, "pytest wrote no report"
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcomes[name] = case.find("failure") is None and case.find("error") is None
    return outcomes, ""


def run_jobs(count: int, rounds: int, timeout: float) -> tuple[int, int, list[str]]:
    """``count`` 2-process ddp jobs at once, ``rounds`` times: (jobs, failed, first lines of failures)."""
    failures: list[str] = []
    total = 0
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="core-stress-") as scratch:
            started = []
            for index in range(count):
                out = Path(scratch) / f"job-{index}"
                out.mkdir()
                process = subprocess.Popen(
                    [sys.executable, str(JOB_SCRIPT), str(out)], env={**clean_environment(), "OMP_NUM_THREADS": "1"},
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )
                started.append((out, process))
            for out, process in started:
                total += 1
                try:
                    _, stderr = process.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    failures.append("a job did not finish in time")
                    continue
                sums = [json.loads(p.read_text())["sum"] for p in sorted(out.glob("rank-*.json"))]
                if process.returncode != 0 or sums != [3.0, 3.0]:
                    lines = [line for line in stderr.splitlines() if line.strip()]
                    failures.append(lines[-1] if lines else f"exit {process.returncode}, sums {sums}")
    return total, len(failures), failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/stress.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=int(os.environ.get("STRESS_N", "10")),
                        help="runs of each multi-process test file (default: STRESS_N or 10)")
    parser.add_argument("--only", help="only test files whose path contains this")
    parser.add_argument("--jobs", type=int, default=8, help="concurrent 2-process ddp jobs per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of concurrent jobs")
    parser.add_argument("--file-timeout", type=float, default=1200.0, help="seconds one test file may take")
    options = parser.parse_args(argv)

    started = time.monotonic()
    runs: collections.Counter[str] = collections.Counter()
    failed: collections.Counter[str] = collections.Counter()
    notes: list[str] = []
    files = multi_process_files(options.only) if options.repeat > 0 else []
    with tempfile.TemporaryDirectory(prefix="core-stress-reports-") as reports:
        for repetition in range(options.repeat):
            for path in files:
                relative = path.relative_to(ROOT)
                outcomes, note = run_file(path, Path(reports) / f"{repetition}-{path.stem}.xml", options.file_timeout)
                if note:
                    runs[str(relative)] += 1
                    failed[str(relative)] += 1
                    notes.append(f"{relative} (run {repetition + 1}): {note}")
                for name, passed in outcomes.items():
                    runs[name] += 1
                    failed[name] += 0 if passed else 1
            print(f"[stress] repetition {repetition + 1}/{options.repeat} done "
                  f"({time.monotonic() - started:.0f} s, {sum(failed.values())} failure(s) so far)", flush=True)

    if files:
        print(f"\n{len(files)} multi-process test file(s), {len(runs)} test(s), {options.repeat} run(s) each:")
        for name in sorted(runs, key=lambda name: (-failed[name], name)):
            if failed[name]:
                print(f"  {failed[name]}/{runs[name]} failed  {name}")
        print(f"  every other test: 0/{options.repeat} failed")
        for note in notes:
            print(f"  note: {note}")
    total_jobs = failed_jobs = 0
    if options.jobs > 0 and options.rounds > 0:
        total_jobs, failed_jobs, failures = run_jobs(options.jobs, options.rounds, options.file_timeout)
        print(f"\n{options.rounds} round(s) of {options.jobs} concurrent 2-process ddp jobs: "
              f"{failed_jobs}/{total_jobs} failed")
        for failure in failures[:10]:
            print(f"  {failure}")
    print(f"\n[stress] {time.monotonic() - started:.0f} s in all")
    return 1 if sum(failed.values()) or failed_jobs else 0


if __name__ == "__main__":
    raise SystemExit(main())
