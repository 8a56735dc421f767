"""Run Lightning 2.6's tests of public behaviour against ``core.lightning``, and write a table per file.

    python scripts/lightning_tests.py --lightning-src /path/to/lightning [--files F ...] [-n 0] [--timeout 120]

Nothing of Lightning is kept in this repository: the tests are read from a Lightning source checkout
(``git clone -b 2.6.5 https://github.com/Lightning-AI/pytorch-lightning``) and copied into a scratch
directory, where the harness

- replaces the top-level conftests and ``helpers/runif.py`` with its own (scripts/lightning_harness/),
- aliases ``lightning``, ``lightning.fabric``, ``lightning.pytorch`` (and ``lightning_fabric``,
  ``pytorch_lightning``) to ``core.lightning`` with a meta-path finder,
- makes each module-level import lazy, so that one refused name fails only the tests that use it.

Then it runs pytest on the chosen files and writes a table per file: passed, failed, skipped, and "not
applicable" for the tests on the reviewed list scripts/lightning_harness/reviewed.py (tests that reach
into Lightning's internals). The fair-test pass rate is passed / (run - not applicable). Tests that differ on
purpose (the list's ``KEPT`` table, each explained in docs/migrating-from-lightning.md) stay in the
denominator, and the table names them.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Final

import attrs

HARNESS: Final = Path(__file__).resolve().parent / "lightning_harness"
LISTS: Final = HARNESS / "reviewed.py"

DEFAULT_FILES: Final = (
    "tests_fabric/test_fabric.py",
    "tests_fabric/test_wrappers.py",
    "tests_fabric/utilities/test_seed.py",
    "tests_fabric/utilities/test_data.py",
    "tests_fabric/utilities/test_apply_func.py",
    "tests_pytorch/trainer/test_trainer.py",
    "tests_pytorch/trainer/test_states.py",
    "tests_pytorch/trainer/flags/test_barebones.py",
    "tests_pytorch/trainer/flags/test_check_val_every_n_epoch.py",
    "tests_pytorch/trainer/flags/test_env_vars.py",
    "tests_pytorch/trainer/flags/test_fast_dev_run.py",
    "tests_pytorch/trainer/flags/test_inference_mode.py",
    "tests_pytorch/trainer/flags/test_limit_batches.py",
    "tests_pytorch/trainer/flags/test_min_max_epochs.py",
    "tests_pytorch/trainer/flags/test_overfit_batches.py",
    "tests_pytorch/trainer/flags/test_val_check_interval.py",
    "tests_pytorch/callbacks/test_early_stopping.py",
    "tests_pytorch/checkpointing/test_model_checkpoint.py",
    "tests_pytorch/checkpointing/test_checkpoint_callback_frequency.py",
    "tests_pytorch/core/test_lightning_module.py",
    "tests_pytorch/core/test_datamodules.py",
    "tests_pytorch/models/test_hooks.py",
    "tests_pytorch/loggers/test_csv.py",
    "tests_pytorch/loggers/test_logger.py",
    "tests_pytorch/trainer/logging_/test_train_loop_logging.py",
    "tests_pytorch/trainer/logging_/test_eval_loop_logging.py",
)
"""The files of public behaviour the harness runs by default (paths under the checkout's ``tests/``)."""

OWN_FILES: Final = {
    "tests_fabric/conftest.py": "conftest.py",
    "tests_pytorch/conftest.py": "conftest.py",
    "tests_fabric/helpers/runif.py": "runif.py",
    "tests_pytorch/helpers/runif.py": "runif.py",
}
"""Files of Lightning's test tree the harness replaces with its own (scripts/lightning_harness/)."""


@attrs.frozen
class Outcome:
    """One test's result: ``passed``, ``failed``, ``error`` or ``skipped``, and the first line of why."""

    nodeid: str
    status: str
    message: str = ""


def prepare(lightning_src: Path, scratch: Path) -> Path:
    """Copy ``tests_fabric`` and ``tests_pytorch`` of the checkout into ``scratch``, ready to run."""
    sys.path.insert(0, str(HARNESS))
    make_imports_lazy = importlib.import_module("lightning_harness_support").make_imports_lazy

    tests = lightning_src / "tests"
    if not (tests / "tests_pytorch").is_dir():
        raise SystemExit(f"{lightning_src} is not a Lightning source checkout: {tests / 'tests_pytorch'} is missing")
    for package in ("tests_fabric", "tests_pytorch"):
        shutil.copytree(tests / package, scratch / package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted(scratch.rglob("*.py")):
        relative = path.relative_to(scratch).as_posix()
        if relative in OWN_FILES:
            shutil.copyfile(HARNESS / OWN_FILES[relative], path)
        else:
            path.write_text(make_imports_lazy(path.read_text()))
    shutil.copyfile(HARNESS / "lightning_harness_support.py", scratch / "lightning_harness_support.py")
    # a pytest plugin (-p) is imported before any conftest or test package __init__
    (scratch / "lightning_harness_plugin.py").write_text(
        "import lightning_harness_support\n"
        "from lightning_harness_support import pytest_pyfunc_call  # noqa: F401\n\n"
        "lightning_harness_support.install_alias()\n"
    )
    (scratch / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    cloud: Lightning's marker\n    standalone: Lightning's marker\n"
        "filterwarnings =\n    ignore::DeprecationWarning\n"
    )
    return scratch


def run_pytest(scratch: Path, files: list[str], workers: int, timeout: int, extra: list[str]) -> Path:
    report = scratch / "junit.xml"
    command = [
        sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-p", "lightning_harness_plugin",
        "-q", "--no-header", "-rN", "--continue-on-collection-errors",
        f"--timeout={timeout}", f"--junitxml={report}", "-o", "junit_family=xunit2",
        *(["-n", str(workers)] if workers else ["-p", "no:xdist"]), *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")])}
    env.setdefault("OMP_NUM_THREADS", "1")
    subprocess.run(command, cwd=scratch, env=env, check=False)
    return report


def read_junit(report: Path) -> list[Outcome]:
    outcomes = []
    for case in ElementTree.parse(report).iter("testcase"):
        # classname is "tests_pytorch.trainer.test_trainer" or "...test_trainer.TestClass"
        if not case.get("classname"):  # a file that failed to collect: junit names it by its module
            parts = [*case.get("name", "").split("."), "(collection)"]
            case.set("name", "(collection)")
        else:
            parts = case.get("classname", "").split(".")
        module_parts = [p for p in parts if not p[:1].isupper() and p != "(collection)"]
        classes = [p for p in parts if p[:1].isupper()]
        path = "/".join(module_parts) + ".py"
        nodeid = "::".join([path, *classes, case.get("name", "")])
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                first_lines = (child.get("message") or "").strip().splitlines()[0:1]
                message = first_lines[0][:300] if first_lines else ""
                break
        outcomes.append(Outcome(nodeid, status, message))
    # a test that fails in teardown has a second entry: keep one per test, the first non-passing
    merged: dict[str, Outcome] = {}
    for outcome in outcomes:
        if outcome.nodeid not in merged or merged[outcome.nodeid].status in ("passed", "skipped"):
            merged[outcome.nodeid] = outcome
    return list(merged.values())


def load_lists() -> tuple[dict[str, str], dict[str, str]]:
    """The reviewed lists of scripts/lightning_harness/reviewed.py: ``NOT_APPLICABLE`` and ``KEPT``
    (test id without parameters -> reason)."""
    namespace = runpy.run_path(str(LISTS))
    not_applicable, kept = namespace["NOT_APPLICABLE"], namespace["KEPT"]
    assert isinstance(not_applicable, dict) and isinstance(kept, dict)
    return dict(not_applicable), dict(kept)


def base_id(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def table(outcomes: list[Outcome], not_applicable: dict[str, str], kept: dict[str, str]) -> str:
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for outcome in outcomes:
        file = outcome.nodeid.split("::", 1)[0]
        if base_id(outcome.nodeid) in not_applicable:
            rows[file]["not applicable"] += 1
            continue
        rows[file]["failed" if outcome.status == "error" else outcome.status] += 1
        if base_id(outcome.nodeid) in kept and outcome.status in ("failed", "error"):  # skipped: no failure
            rows[file]["kept"] += 1
    lines = [
        "| file | passed | failed | of which kept | skipped | not applicable | fair pass rate |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total: collections.Counter[str] = collections.Counter()
    for file in sorted(rows):
        row = rows[file]
        total.update(row)
        fair = row["passed"] + row["failed"]
        rate = f"{100 * row['passed'] / fair:.0f} %" if fair else "-"
        lines.append(f"| {file} | {row['passed']} | {row['failed']} | {row['kept']} | {row['skipped']} "
                     f"| {row['not applicable']} | {rate} |")
    fair = total["passed"] + total["failed"]
    rate = f"{100 * total['passed'] / fair:.1f} %" if fair else "-"
    lines.append(f"| **all** | **{total['passed']}** | **{total['failed']}** | {total['kept']} | {total['skipped']} "
                 f"| {total['not applicable']} | **{rate}** |")
    return "\n".join(lines) + "\n"


INTERNAL_SIGNS: Final = (
    (r"has no attribute '(_[^_]\w*)'", "reads Lightning's private attribute `{0}`"),
    (r"does not have the attribute '(_[^_]\w*)'", "patches Lightning's private method `{0}`"),
    (r"has no attribute '((?:fit|validate|test|predict)_loop)'", "drives Lightning's loop object `trainer.{0}`"),
    (r"import (?:\w+ as )?(_\w+)", "imports Lightning's private `{0}`"),
    (r"import ([\w.]*_\w*connector\w*|[\w.]*\.loops[\w.]*)", "imports Lightning's internal `{0}`"),
    (r"`from tests_\w+\.conftest import (\w+)`", "mocks Lightning's device detection (`{0}` of its conftest)"),
    (r"fixture '(xla_available|tpu_available|cuda_count_[1-9]|mps_count_1)' not found",
     "mocks Lightning's device detection (fixture `{0}`)"),
    (r"'(os|torch|log|warnings|sys|logging|inspect|signal|rank_zero_\w+|_\w+)' is not a Lightning name or module",
     "patches `{0}` inside a module of Lightning's implementation"),
    (r"core\.lightning\.[\w.]+\.(os|torch|log|warnings|sys|inspect|signal) is not a Lightning name",
     "patches `{0}` inside a module of Lightning's implementation"),
    (r"import core\.lightning\.pytorch\.(loops|trainer\.connectors)", "imports Lightning's `{0}` internals"),
)
"""Failure messages that show a test reaching into Lightning's internals, with the reason to review."""


_INTERNAL_OBJECTS: Final = frozenset({
    "fit_loop", "validate_loop", "test_loop", "predict_loop", "epoch_loop", "batch_progress", "epoch_progress",
    "connect", "_launcher",
})
"""Public-looking attribute names that are Lightning's internal objects (its loops, ``strategy.connect``)."""


def internal_reference(lightning_src: Path, test: str) -> str | None:
    """The first internal of Lightning's that the test's own code touches, or None.

    Private attributes (``trainer._data_connector``), Lightning's loop objects, ``mock.patch`` targets inside a
    Lightning module (``"lightning.fabric.utilities.data.os"``) and imports of private names.
    """
    import ast
    import re

    path, _, name = test.partition("::")
    name = name.split("::")[-1]
    file = lightning_src / "tests" / path
    if not file.is_file():
        return None
    source = file.read_text()
    tree = ast.parse(source)
    function = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name), None)
    if function is None:
        return None
    # the test file's own private names (its helpers' methods and attributes) are not Lightning's
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    own |= {target.attr for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr not in own:
            attribute = node.attr
            if (attribute.startswith("_") and not attribute.startswith("__")) or attribute in _INTERNAL_OBJECTS:
                return f"uses Lightning's internal `{ast.unparse(node)}`"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            target = node.value
            if re.fullmatch(r"lightning\.[\w.]+", target) and any(
                part.startswith("_") or part in ("os", "torch", "log", "inspect", "warnings", "sys", "signal")
                for part in target.split(".")[1:]
            ):
                return f"patches `{target}` inside Lightning's implementation"
        if isinstance(node, ast.ImportFrom) and any(alias.name.startswith("_") for alias in node.names):
            private = next(alias.name for alias in node.names if alias.name.startswith("_"))
            return f"imports Lightning's private `{private}`"
    return None


def suggest_not_applicable(
    outcomes: list[Outcome], kept: dict[str, str], lightning_src: Path | None = None
) -> dict[str, str]:
    """Candidates for the reviewed list: failing tests whose message, or whose own code, shows an internal.

    Only a suggestion: each entry is read against the test before it goes into the list, and a test whose
    failure is a public behaviour stays out of it (it is then fixed, or kept with a reason).
    """
    import re

    found: dict[str, str] = {}
    for outcome in outcomes:
        test = base_id(outcome.nodeid)
        if outcome.status not in ("failed", "error") or test in kept or test in found:
            continue
        for pattern, reason in INTERNAL_SIGNS:
            match = re.search(pattern, outcome.message)
            if match:
                found[test] = reason.format(*match.groups())
                break
        else:
            reference = internal_reference(lightning_src, test) if lightning_src is not None else None
            if reference is not None:
                found[test] = reference
    return found


def failures(outcomes: list[Outcome], not_applicable: dict[str, str], kept: dict[str, str]) -> str:
    lines = []
    for outcome in outcomes:
        if outcome.status in ("failed", "error") and base_id(outcome.nodeid) not in not_applicable:
            note = " (kept: " + kept[base_id(outcome.nodeid)] + ")" if base_id(outcome.nodeid) in kept else ""
            lines.append(f"- `{outcome.nodeid}`{note}: {outcome.message}")
    return "\n".join(lines) + "\n"


def write_suggestions(path: Path, suggested: dict[str, str]) -> None:
    entries = [f"    {test!r}: {reason!r}," for test, reason in sorted(suggested.items())]
    lines = ["NOT_APPLICABLE_SUGGESTED = {", *entries]
    path.write_text("\n".join([*lines, "}"]) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lightning-src", type=Path, required=True, help="a Lightning 2.6 source checkout")
    parser.add_argument("--files", nargs="*", default=list(DEFAULT_FILES), help="test files under tests/")
    parser.add_argument("-n", "--workers", type=int, default=0, help="pytest-xdist workers (0: one process)")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("--out", type=Path, default=Path("lightning-tests"), help="directory for the report")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy of the tests")
    parser.add_argument("--from-results", type=Path, default=None,
                        help="no run: the tables again from a results.json (after editing the reviewed lists)")
    parser.add_argument("--suggest", action="store_true",
                        help="also write not_applicable_suggested.py: failing tests whose message shows an internal")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)

    if args.from_results is not None:
        outcomes = [Outcome(**item) for item in json.loads(args.from_results.read_text())]
        return report(args, outcomes)
    scratch = Path(tempfile.mkdtemp(prefix="lightning-tests-"))
    try:
        prepare(args.lightning_src.resolve(), scratch)
        junit = run_pytest(scratch, args.files, args.workers, args.timeout, args.pytest_args)
        if not junit.exists():
            print(f"pytest wrote no report ({junit}); see its output above", file=sys.stderr)
            return 2
        outcomes = read_junit(junit)
    finally:
        if args.keep:
            print(f"scratch copy kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return report(args, outcomes)


def report(args: argparse.Namespace, outcomes: list[Outcome]) -> int:
    """Write results.json, the table, the failures (and the suggestions) into ``args.out``; print the table."""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps([attrs.asdict(o) for o in outcomes], indent=1))
    not_applicable, kept = load_lists()
    summary = table(outcomes, not_applicable, kept)
    (args.out / "table.md").write_text(summary)
    (args.out / "failures.md").write_text(failures(outcomes, not_applicable, kept))
    if args.suggest:
        suggested = suggest_not_applicable(outcomes, kept, args.lightning_src)
        write_suggestions(args.out / "not_applicable_suggested.py", suggested)
    print(summary)
    print(f"report: {args.out}/table.md, failures.md, results.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
