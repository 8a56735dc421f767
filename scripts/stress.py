"""``make stress``: run every multi-process test file N times, then many 2-process ddp jobs at once.

Not part of ``make test``: it takes a long time on purpose. It prints, per test, how many of its runs
failed, and for the concurrent jobs how many of them failed, so that a flaky test shows up as a number rather
than as a red CI run once in a while. A test file counts as multi-process when it is marked ``distributed``
(or runs the conformance kit's strategy jobs).

    python scripts/stress.py --repeat 10                 # every multi-process file, 10 times each
    python scripts/stress.py --repeat 3 --only ddp       # files whose path contains "ddp" (--only again: or)
    python scripts/stress.py --repeat 0 --jobs 8 --rounds 5   # only the concurrent jobs
    python scripts/stress.py --workers 2 --record runs.jsonl  # two files at once, every run appended to a record
    python scripts/stress.py --summarize a.jsonl b.jsonl      # the counts over earlier records, nothing run
    python scripts/stress.py --workers 2 --record runs.jsonl --resume   # go on where that record stopped

With ``--workers 2`` two files run at once, as under ``make unit``; a file holding tests marked ``serial``
(timing-sensitive, see CONTRIBUTING) always runs alone. ``--record`` appends one JSON line per file run (its
repetition, every test's outcome and the first lines of each failure) as soon as the run ends, so an
interrupted stress run keeps what it measured, and runs of several sessions add up with ``--summarize``.
``--resume`` skips the file runs and job rounds its record already holds, so a ``make stress`` longer than one
sitting finishes over several; each entry names the commit it ran, and the summary lists them.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB_SCRIPT = ROOT / "plugins" / "core-ddp" / "tests" / "scripts" / "rendezvous_job.py"
_LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "LOCAL_WORLD_SIZE", "CORE_DDP_JOB")
_FAILURE_CHARS = 2000  # of each failure's text kept in the record: the assertion and the end of the traceback
JOBS = "concurrent 2-process ddp jobs"  # the record's name for a round of them, beside the test files' paths


def multi_process_files(only: Sequence[str] | None = None) -> list[Path]:
    """Test files that start several processes: marked ``distributed``, or running the kit's strategy jobs.

    ``only``: keep the files whose path contains any of these strings (all of them when None or empty).
    """
    candidates = sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("plugins/*/tests/**/test_*.py"),
                         *ROOT.glob("contrib/*/tests/**/test_*.py")])
    markers = ("mark.distributed", "StrategyConformance", "ExtensionConformance")  # the kit's jobs are real too
    return [path for path in candidates if any(marker in path.read_text() for marker in markers)
            and (not only or any(text in str(path) for text in only))]


def runs_alone(path: Path) -> bool:
    """A file with tests marked ``serial`` depends on timing a second file running beside it would disturb."""
    return "mark.serial" in path.read_text()


def current_commit() -> str:
    """The checkout's commit, with "+changes" when files differ from it ("" outside a git checkout)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return commit + ("+changes" if changed else "")


def clean_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}


def _failure_text(case: ElementTree.Element) -> str:
    element = case.find("failure")
    if element is None:
        element = case.find("error")
    if element is None:
        return ""
    text = f"{element.get('message', '')}\n{element.text or ''}".strip()
    return text if len(text) <= _FAILURE_CHARS else "..." + text[-_FAILURE_CHARS:]


def run_file(path: Path, report: Path, timeout: float) -> tuple[dict[str, str], str]:
    """Run one test file once: each test's failure text ("" when it passed or was skipped) and a note on the file."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               f"--junitxml={report}", str(path)]
    try:
        subprocess.run(command, cwd=ROOT, env=clean_environment(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, f"the file did not finish within {timeout:.0f} s"
    if not report.exists():
        return {}, "pytest wrote no report"
    return {f"{case.get('classname')}::{case.get('name')}": _failure_text(case)
            for case in ElementTree.parse(report).getroot().iter("testcase")}, ""


class Tally:
    """Runs and failures per test; each file run is printed, and appended to the record, as it ends."""

    def __init__(self, record: Path | None, commit: str = "") -> None:
        self.runs: collections.Counter[str] = collections.Counter()
        self.failed: collections.Counter[str] = collections.Counter()
        self.failures: list[str] = []
        self.done: set[tuple[str, int]] = set()  # (file, repetition) pairs already run
        self.commits: collections.Counter[str] = collections.Counter()  # file runs per commit
        self.record = record
        self.commit = commit
        self._lock = threading.Lock()

    def add(self, file: str, repetition: int, outcomes: dict[str, str], note: str = "", seconds: float = 0.0,
            *, echo: bool = True, write: bool = True, commit: str | None = None) -> None:
        """One run of ``file``: each test's failure text ("" when it passed) and a note when the file itself failed."""
        commit = self.commit if commit is None else commit
        with self._lock:
            self.done.add((file, repetition))
            self.commits[commit or "unknown commit"] += 1
            if note:
                self.runs[file] += 1
                self.failed[file] += 1
                self.failures.append(f"{file} (run {repetition + 1}): {note}")
            for name, failure in outcomes.items():
                self.runs[name] += 1
                if failure:
                    self.failed[name] += 1
                    self.failures.append(f"{name} (run {repetition + 1}):\n    "
                                         + "\n    ".join(failure.splitlines()[-12:]))
            if echo:
                bad = sum(1 for failure in outcomes.values() if failure) + (1 if note else 0)
                print(f"[stress] run {repetition + 1} {file}: {len(outcomes)} test(s), {bad} failed ({seconds:.0f} s)",
                      flush=True)
            if write and self.record is not None:
                entry = {"file": file, "repetition": repetition, "outcomes": outcomes, "note": note,
                         "seconds": round(seconds, 1), "commit": commit}
                with self.record.open("a") as stream:
                    stream.write(json.dumps(entry) + "\n")

    def report(self) -> None:
        if not self.runs:
            return
        counts = sorted(set(self.runs.values()))
        spread = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        files = len({file for file, _ in self.done} - {JOBS})
        rounds = sum(1 for file, _ in self.done if file == JOBS)
        jobs = f" and {rounds} round(s) of concurrent ddp jobs" if rounds else ""
        print(f"\n{files} multi-process test file(s){jobs}, {len(self.runs)} test(s), {spread} run(s) each:")
        for name in sorted(self.runs, key=lambda name: (-self.failed[name], name)):
            if self.failed[name]:
                print(f"  {self.failed[name]}/{self.runs[name]} failed  {name}")
        clean = [name for name in self.runs if not self.failed[name]]
        print(f"  {len(clean)} other test(s): 0 failed in {sum(self.runs[name] for name in clean)} run(s)")
        for failure in self.failures:
            print(f"  failure: {failure}")
        print("  commits: " + ", ".join(f"{commit} ({runs} run(s))" for commit, runs in sorted(self.commits.items())))


def read_records(paths: Iterable[Path], tally: Tally | None = None) -> Tally:
    """Add the runs of these records to ``tally`` (a new one when None) without writing them again."""
    tally = Tally(record=None) if tally is None else tally
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                tally.add(entry["file"], entry["repetition"], entry["outcomes"], entry.get("note", ""),
                          entry.get("seconds", 0.0), echo=False, write=False, commit=entry.get("commit", ""))
    return tally


def run_files(files: list[Path], repeat: int, workers: int, timeout: float, tally: Tally) -> None:
    """Every file ``repeat`` times, repetition by repetition; ``workers`` files at once, a serial file alone."""
    started = time.monotonic()

    def one(path: Path, repetition: int, reports: Path) -> None:
        began = time.monotonic()
        outcomes, note = run_file(path, reports / f"{repetition}-{path.parent.parent.name}-{path.stem}.xml", timeout)
        tally.add(str(path.relative_to(ROOT)), repetition, outcomes, note, time.monotonic() - began)

    with tempfile.TemporaryDirectory(prefix="core-stress-reports-") as scratch:
        reports = Path(scratch)
        for repetition in range(repeat):
            left = [path for path in files if (str(path.relative_to(ROOT)), repetition) not in tally.done]
            shared = [path for path in left if not runs_alone(path)]
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                for future in [pool.submit(one, path, repetition, reports) for path in shared]:
                    future.result()
            for path in left:
                if runs_alone(path):
                    one(path, repetition, reports)
            print(f"[stress] repetition {repetition + 1}/{repeat} done ({time.monotonic() - started:.0f} s, "
                  f"{sum(tally.failed.values())} failure(s) so far)", flush=True)


def run_jobs(count: int, rounds: int, timeout: float, tally: Tally) -> tuple[int, int, list[str]]:
    """``count`` 2-process ddp jobs at once, ``rounds`` times: (jobs, failed, first lines of failures).

    Each round goes to ``tally`` (and its record) as one run of ``JOBS``; a round the tally already holds is skipped.
    """
    failures: list[str] = []
    total = 0
    for round_index in range(rounds):
        if (JOBS, round_index) in tally.done:
            continue
        began = time.monotonic()
        outcomes: dict[str, str] = {}
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
            for index, (out, process) in enumerate(started):
                total += 1
                failure = ""
                try:
                    _, stderr = process.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
                    failure = "a job did not finish in time"
                else:
                    sums = [json.loads(p.read_text())["sum"] for p in sorted(out.glob("rank-*.json"))]
                    if process.returncode != 0 or sums != [3.0, 3.0]:
                        lines = [line for line in stderr.splitlines() if line.strip()]
                        failure = lines[-1] if lines else f"exit {process.returncode}, sums {sums}"
                if failure:
                    failures.append(failure)
                outcomes[f"{JOBS}::job {index}"] = failure
        tally.add(JOBS, round_index, outcomes, seconds=time.monotonic() - began)
    return total, len(failures), failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/stress.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=int(os.environ.get("STRESS_N", "10")),
                        help="runs of each multi-process test file (default: STRESS_N or 10)")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="only test files whose path contains this (repeat it for several)")
    parser.add_argument("--workers", type=int, default=1,
                        help="test files run at once (default 1; a file with serial tests always runs alone)")
    parser.add_argument("--jobs", type=int, default=8, help="concurrent 2-process ddp jobs per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of concurrent jobs")
    parser.add_argument("--file-timeout", type=float, default=1200.0, help="seconds one test file may take")
    parser.add_argument("--record", type=Path, help="append every file run to this JSON-lines file as it ends")
    parser.add_argument("--resume", action="store_true",
                        help="with --record: skip the file runs and job rounds that record already holds")
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="RECORD",
                        help="print the counts over these records and run nothing")
    options = parser.parse_args(argv)

    if options.summarize:
        tally = read_records(options.summarize)
        tally.report()
        return 1 if sum(tally.failed.values()) else 0

    if options.resume and options.record is None:
        parser.error("--resume goes on from a record: name it with --record FILE")
    started = time.monotonic()
    tally = Tally(options.record, current_commit())
    if options.resume and options.record.exists():
        read_records([options.record], tally)
        print(f"[stress] resuming: {len(tally.done)} file run(s) and job round(s) already in {options.record}",
              flush=True)
    files = multi_process_files(options.only) if options.repeat > 0 else []
    if options.repeat > 0 and options.only and not files:
        parser.error(f"--only {' '.join(options.only)}: no multi-process test file's path contains that; "
                     "they are the files marked distributed (see CONTRIBUTING)")
    if files:
        run_files(files, options.repeat, options.workers, options.file_timeout, tally)
    total_jobs = failed_jobs = 0
    if options.jobs > 0 and options.rounds > 0:
        total_jobs, failed_jobs, failures = run_jobs(options.jobs, options.rounds, options.file_timeout, tally)
        print(f"\n{options.rounds} round(s) of {options.jobs} concurrent 2-process ddp jobs: "
              f"{failed_jobs}/{total_jobs} failed")
        for failure in failures[:10]:
            print(f"  {failure}")
    tally.report()  # every run, a resumed record's included
    print(f"\n[stress] {time.monotonic() - started:.0f} s in all")
    return 1 if sum(tally.failed.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
