"""scripts/stress.py: a file run's outcomes and failure text come from pytest's report, every run is appended to
the record as it ends, and --summarize adds up records of several sessions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("stress", Path(__file__).resolve().parents[1] / "scripts" / "stress.py")
assert _SPEC is not None and _SPEC.loader is not None
stress = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(stress)

TWO_TESTS = """
def test_passes():
    assert True

def test_fails():
    assert 1 + 1 == 3, "arithmetic is off by one"
"""


def test_a_file_run_reports_each_test_with_the_failure_text(tmp_path: Path) -> None:
    test_file = tmp_path / "test_two.py"
    test_file.write_text(TWO_TESTS)
    outcomes, note = stress.run_file(test_file, tmp_path / "report.xml", timeout=120)
    assert note == ""
    # The class name is the file's path from pytest's root (the checkout here), so only its end is fixed.
    by_test = {name.rsplit(".", 1)[-1]: failure for name, failure in outcomes.items()}
    assert by_test["test_two::test_passes"] == ""
    assert "arithmetic is off by one" in by_test["test_two::test_fails"]


def test_the_record_keeps_every_run_and_the_summary_adds_records_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    tally = stress.Tally(first)
    tally.add("tests/test_a.py", 0, {"test_a::test_x": "", "test_a::test_y": "AssertionError: 30 < 27"}, seconds=4)
    tally.add("tests/test_a.py", 1, {"test_a::test_x": "", "test_a::test_y": ""}, seconds=3)
    stress.Tally(second).add("tests/test_b.py", 0, {}, note="the file did not finish within 1200 s")
    assert [json.loads(line)["repetition"] for line in first.read_text().splitlines()] == [0, 1]

    assert stress.main(["--summarize", str(first), str(second)]) == 1
    out = capsys.readouterr().out
    assert "2 multi-process test file(s), 3 test(s), 1-2 run(s) each" in out
    assert "1/2 failed  test_a::test_y" in out
    assert "1/1 failed  tests/test_b.py" in out
    assert "1 other test(s): 0 failed in 2 run(s)" in out
    assert "30 < 27" in out and "did not finish within 1200 s" in out
    assert "commits: unknown commit (3 run(s))" in out  # these entries were written without a commit

    clean = tmp_path / "clean.jsonl"
    stress.Tally(clean).add("tests/test_a.py", 0, {"test_a::test_x": ""})
    assert stress.main(["--summarize", str(clean)]) == 0


def test_files_with_serial_tests_run_alone() -> None:
    files = stress.multi_process_files(None)
    alone = {path.name for path in files if stress.runs_alone(path)}
    assert "test_hivemind_peers.py" in alone  # marked serial: peers must hear each other in time
    assert "test_ddp_rendezvous.py" not in alone


def test_tests_that_start_processes_through_a_script_or_core_run_are_selected() -> None:
    # Each starts its processes indirectly (a benchmark, a generated package, core.run, a script): stress finds
    # them only by their distributed mark, which they once lacked.
    names = {path.name for path in stress.multi_process_files()}
    assert {"test_bench_smoke.py", "test_template.py", "test_lite_launcher_defaults.py",
            "test_powersgd_bytes.py"} <= names
    assert "test_resolver.py" not in names  # resolves devices=2 in this process: no second process


def test_only_keeps_the_files_matching_any_of_its_values() -> None:
    chosen = {path.name for path in stress.multi_process_files(["bench_smoke", "powersgd_bytes"])}
    assert chosen == {"test_bench_smoke.py", "test_powersgd_bytes.py"}


def test_an_only_matching_no_file_is_an_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        stress.main(["--repeat", "1", "--only", "no-such-file", "--jobs", "0"])
    assert exited.value.code == 2
    assert "--only no-such-file: no multi-process test file's path contains that" in capsys.readouterr().err


def test_resume_runs_only_what_the_record_lacks_and_notes_each_runs_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scheduling only: run_file is replaced by a stand-in that notes its calls, so no test file really runs here
    # (test_a_file_run_reports_each_test_with_the_failure_text covers the real run).
    record = tmp_path / "record.jsonl"
    first, second = stress.multi_process_files(["bench_smoke", "powersgd_bytes"])
    earlier = stress.Tally(record, commit="abc1234")
    earlier.add(str(first.relative_to(stress.ROOT)), 0, {"bench::test_x": ""})
    earlier.add(stress.JOBS, 0, {f"{stress.JOBS}::job 0": ""})

    calls: list[tuple[str, int]] = []

    def run_file(path: Path, report: Path, timeout: float) -> tuple[dict[str, str], str]:
        calls.append((path.name, int(report.name.split("-", 1)[0])))
        return {f"{path.stem}::test_x": ""}, ""

    monkeypatch.setattr(stress, "run_file", run_file)
    resumed = stress.Tally(record, commit="def5678")
    stress.read_records([record], resumed)
    stress.run_files([first, second], 2, 1, 60.0, resumed)
    assert sorted(calls) == sorted([(second.name, 0), (first.name, 1), (second.name, 1)])
    assert stress.run_jobs(8, 1, 60.0, resumed) == (0, 0, [])  # the one round is in the record: no job started
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert [entry["commit"] for entry in entries] == ["abc1234", "abc1234", "def5678", "def5678", "def5678"]


def test_resume_needs_a_record(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        stress.main(["--resume", "--repeat", "0", "--jobs", "0"])
    assert "--resume goes on from a record" in capsys.readouterr().err
