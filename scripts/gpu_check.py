"""The GPU check (``make gpu-check``): install, the tests marked ``gpu``, the GPU benchmark, each within its budget.

    python scripts/gpu_check.py --out DIR               # on the GPU machine: everything it writes lands in DIR
    python scripts/gpu_check.py --dry-run [--out DIR]   # anywhere (CI): install into a temporary target, list the
                                                        # tests and benchmark configurations it would run, exit 0
    python scripts/gpu_check.py --out DIR --only tests  # one phase again (install always runs first)

Written for a machine whose Python already holds a CUDA torch, Lightning, Accelerate, pytest and hypothesis, and
that reaches no package index. The install phase never touches that torch: ``core`` and the plugins the checks
use are built from the working tree with ``pip install --no-deps --no-build-isolation --no-index --target SITE``
into a fresh directory that is put first on ``PYTHONPATH``, so it sees the machine's own site-packages behind it.
Pure-Python packages that machine lacks travel as wheels in ``.gpu-wheels/`` (``make gpu-wheels`` fills it here);
a ``setuptools`` wheel among them is the build backend, used for the build only.

Each phase runs as a child process in its own session, killed with all its children at its budget. The plan's
budgets add up to well under 8 minutes and are printed first; the summary written after every phase
(``gpu-check-summary.md``) says what ran, for how long, and what failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".gpu-wheels"
# core and the plugins the gpu tests and the benchmark select; nothing else is installed there.
DISTRIBUTIONS = (".", "plugins/core-cuda", "plugins/core-amp", "plugins/core-ddp", "plugins/core-dcp",
                 "plugins/core-fsdp", "plugins/core-model-parallel", "plugins/core-torchao")
GPU_TESTS = ("tests/gpu",)
LIMIT_S = 480.0  # the check must end inside 8 minutes, its own start included
# The strategies file (one NCCL job with a compile) and the digits demo take most of the tests' time; side by side on
# one GPU and 16 cores they end sooner. Each file runs whole on one worker.
TEST_WORKERS = 3


@dataclass(frozen=True)
class Phase:
    name: str
    budget_s: float
    what: str


PLAN = (
    Phase("install", 60.0, "pip install --no-deps --no-build-isolation --no-index --target SITE: core and "
          f"{len(DISTRIBUTIONS) - 1} plugins from the working tree, plus the wheels in .gpu-wheels/"),
    Phase("tests", 150.0, f"pytest -m gpu {' '.join(GPU_TESTS)} on {TEST_WORKERS} xdist workers (a file whole on "
          "one): JUnit XML and log under --out"),
    Phase("bench", 200.0, "python -m bench.gpu_gpt: GPT-2-small shape, raw / Lite / Fabric / Accelerate, eager, "
          "fsdp world size 1, compiled; gpu-results.json and .md under --out"),
)
OVERHEAD_S = 15.0
DRY_RUN_BUDGET_S = 300.0  # interpreter start, the summary, process teardown between phases


def planned_total() -> float:
    return sum(phase.budget_s for phase in PLAN) + OVERHEAD_S


@dataclass
class Outcome:
    name: str
    status: str = "not run"  # ok, failed, timed out, not run
    seconds: float = 0.0
    detail: list[str] = field(default_factory=list)


def print_plan() -> None:
    print("GPU check plan (each budget enforced: the phase is killed when it runs out):", flush=True)
    for phase in PLAN:
        print(f"  {phase.name:<8} {phase.budget_s:5.0f} s  {phase.what}", flush=True)
    total = planned_total()
    print(f"  {'overhead':<8} {OVERHEAD_S:5.0f} s  interpreter start, summaries, teardown", flush=True)
    print(f"  {'total':<8} {total:5.0f} s  of the {LIMIT_S:.0f} s limit (8 minutes)", flush=True)


# ---------------------------------------------------------------------------------------------- child processes


def run_phase(command: list[str], env: dict[str, str], budget_s: float, log: Path) -> tuple[int | None, float]:
    """Run ``command`` in its own session, its output to stdout and ``log``; kill the session at ``budget_s``.

    Returns (exit status or None when killed at the budget, seconds)."""
    start = time.perf_counter()
    with log.open("a") as sink:
        shown = (argument if "\n" not in argument else "<script>" for argument in command)
        sink.write(f"$ {' '.join(shown)}\n")
        sink.flush()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                sink.write(line)
                print(line, end="", flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            status: int | None = process.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            status = None
            _kill_session(process)
        reader.join(timeout=10)
        if status is None:
            sink.write(f"\n[gpu-check] killed at the phase budget of {budget_s:.0f} s\n")
    return status, time.perf_counter() - start


def _kill_session(process: subprocess.Popen[str]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def environment(site: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with ``site`` first on ``PYTHONPATH`` (the machine's site-packages stay behind it)."""
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(extra or {})}


# --------------------------------------------------------------------------------------------------- the phases

VERIFY = r"""
import importlib, importlib.metadata as md, json, sys
from pathlib import Path
from packaging.requirements import Requirement
site, imports = Path(sys.argv[1]).resolve(), sys.argv[2] == "1"
names = sys.argv[3:]
import torch
report = {"torch": torch.__version__, "torch_file": torch.__file__, "cuda": torch.cuda.is_available(),
          "installed": {}, "missing": []}
assert not Path(torch.__file__).resolve().is_relative_to(site), "torch was installed into the target"
for name in names:
    dist = md.distribution(name)
    report["installed"][name] = dist.version
    for line in dist.requires or ():
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            found = md.version(requirement.name)
        except md.PackageNotFoundError:
            report["missing"].append(f"{requirement} (needed by {name}; not installed)")
            continue
        if found not in requirement.specifier:
            report["missing"].append(f"{requirement} (needed by {name}; {found} installed)")
    if imports:
        importlib.import_module(name.replace("-", "_"))
print(json.dumps(report))
"""


def stage_sources(into: Path) -> list[Path]:
    """A copy of each distribution's sources to build from, so that the build writes its ``build/`` and ``*.egg-info``
    there and never into the working tree (tests/test_dist.py builds the same trees, maybe at the same time in CI)."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests", ".mypy_cache", ".ruff_cache")
    staged = []
    for distribution in DISTRIBUTIONS:
        source = ROOT / distribution
        target = into / ("core" if distribution == "." else source.name)
        if distribution == ".":  # the root project packages core/ only; the rest of the repository stays behind
            target.mkdir(parents=True)
            for path in [ROOT / "pyproject.toml", ROOT / "README.md", *ROOT.glob("LICEN[CS]E*"), *ROOT.glob("NOTICE*")]:
                shutil.copy2(path, target)
            shutil.copytree(ROOT / "core", target / "core", ignore=ignore)
        else:
            shutil.copytree(source, target, ignore=ignore)
        staged.append(target)
    return staged


def for_this_interpreter(wheels: list[Path]) -> tuple[list[Path], list[Path]]:
    """The wheels this interpreter can install, and the others (judged by their file names' tags)."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    supported = set(sys_tags())
    fitting = [wheel for wheel in wheels if parse_wheel_filename(wheel.name)[3] & supported]
    return fitting, [wheel for wheel in wheels if wheel not in fitting]


# ------------------------------------------------------------------------------------- the image's packages

IMAGE = ROOT / "scripts" / "gpu_image.json"
"""What is known of the GPU image's packages (partial until recorded there: ``gpu-image.json`` under --out)."""
_OWN = re.compile(r"^core(-[a-z0-9-]+)?$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def carried_pins(makefile: Path = ROOT / "Makefile") -> dict[str, str]:
    """The wheels ``make gpu-wheels`` carries (every ``GPU_WHEEL_PINS`` line, ``?=`` and ``+=``): name -> version."""
    lines = re.findall(r"^GPU_WHEEL_PINS (?:\?|\+)?= (.+)$", makefile.read_text(), re.MULTILINE)
    pins = [pin for line in lines for pin in line.split()]
    return {_canonical(pin.split("==")[0]): pin.split("==")[1] for pin in pins if "==" in pin}


def distribution_requirements(distributions: tuple[str, ...] = DISTRIBUTIONS) -> list[tuple[str, str]]:
    """``(distribution, requirement)`` for every dependency of core and the plugins the check installs, but each
    other: what the image (or the carried wheels) must provide."""
    # Python >= 3.11 (the GPU machine has 3.12); mypy checks for 3.10.
    import tomllib  # type: ignore[import-not-found,unused-ignore]

    found = []
    for directory in distributions:
        project = tomllib.loads((ROOT / directory / "pyproject.toml").read_text())["project"]
        for requirement in project.get("dependencies", []):
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
            if not _OWN.match(_canonical(name)):
                found.append((project["name"], requirement))
    return found


def requirements_against_image(image: dict[str, object], pins: dict[str, str],
                               requirements: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """Check each requirement against a carried wheel, else the image's version: ``(problems, unverified)``.

    A problem is a requirement neither meets (the package absent, or its version outside the range): the install
    on the GPU machine would fail on it. Unverified: present in the image, version not recorded (a partial record).
    """
    from packaging.requirements import Requirement
    from packaging.version import Version

    packages = {_canonical(name): version for name, version in dict(image["packages"]).items()}  # type: ignore[call-overload]
    problems, unverified = [], []
    for owner, line in requirements:
        requirement = Requirement(line)
        name = _canonical(requirement.name)
        carried = pins.get(name)
        version = carried if carried is not None else packages.get(name, "absent")
        if version == "absent":
            problems.append(f"{line} (needed by {owner}): not in the image and not carried; add it to GPU_WHEEL_PINS")
        elif version is None:
            unverified.append(f"{line} (needed by {owner}): in the image, version not recorded")
        elif not requirement.specifier.contains(Version(str(version).split("+")[0]), prereleases=True):
            where = "carried" if carried is not None else "in the image"
            problems.append(f"{line} (needed by {owner}): {version} {where}; carry a matching wheel (GPU_WHEEL_PINS)")
    return problems, unverified


def check_image(outcome: Outcome) -> bool:
    """Add the requirements check against :data:`IMAGE` to ``outcome``; whether every requirement is met."""
    image = json.loads(IMAGE.read_text())
    problems, unverified = requirements_against_image(image, carried_pins(), distribution_requirements())
    partial = " (partial record)" if image.get("partial") else ""
    outcome.detail.append(f"requirements against {IMAGE.name}{partial}: {len(problems)} unmet, "
                          f"{len(unverified)} unverified")
    outcome.detail += [f"unmet: {problem}" for problem in problems]
    outcome.detail += [f"unverified: {line}" for line in unverified]
    return not problems


def record_image(python: str, out: Path) -> None:
    """On the GPU machine: its whole package list, as ``pip list --format json``, to ``out/gpu-image.json``."""
    listed = subprocess.run([python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            capture_output=True, text=True, timeout=60)
    if listed.returncode == 0:
        packages = {row["name"]: row["version"] for row in json.loads(listed.stdout)}
        record = {"about": "pip list of the GPU image, written by scripts/gpu_check.py", "partial": False,
                  "python": sys.version.split()[0], "packages": packages, "absent": []}
        (out / "gpu-image.json").write_text(json.dumps(record, indent=2) + "\n")


def install(site: Path, build: Path, python: str, log: Path, budget_s: float, dry_run: bool) -> Outcome:
    outcome = Outcome("install")
    if dry_run and not check_image(outcome):  # the next mismatch with the GPU image fails here, in CI
        outcome.status = "failed"
        return outcome
    if not dry_run:
        record_image(python, log.parent)
    deadline = time.perf_counter() + budget_s
    wheels, foreign = for_this_interpreter(sorted(WHEELS.glob("*.whl")) if WHEELS.is_dir() else [])
    if foreign:  # .gpu-wheels holds cp312 builds; a dry run on another Python leaves them out
        outcome.detail.append("left out, not for this interpreter: " + ", ".join(wheel.name for wheel in foreign))
    backend = [wheel for wheel in wheels if wheel.name.startswith("setuptools-")]
    runtime = [wheel for wheel in wheels if wheel not in backend]
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-compile", "--upgrade",
           "--disable-pip-version-check"]
    steps: list[tuple[str, list[str], dict[str, str]]] = []
    if backend:
        steps.append(("the build backend", [*pip, "--target", str(build), *map(str, backend)], environment(site)))
    if runtime:
        steps.append(("carried wheels", [*pip, "--target", str(site), *map(str, runtime)], environment(site)))
    build_env = environment(site, {"PYTHONPATH": os.pathsep.join(filter(None, [str(build), str(site)]))})
    sources = stage_sources(build.parent / "sources")
    steps.append(("the working tree", [*pip, "--no-build-isolation", "--target", str(site), *map(str, sources)],
                  build_env))
    names = ["core", *(Path(dist).name for dist in DISTRIBUTIONS[1:])]
    # Every requirement of every installed distribution met (version included), torch left where it was, and each
    # package imported (a dry run only reads the metadata: collecting the tests imports them anyway).
    verify = [python, "-c", VERIFY, str(site), "0" if dry_run else "1", *names]
    steps.append(("verification", verify, environment(site)))
    for label, command, env in steps:
        left = deadline - time.perf_counter()
        status, seconds = run_phase(command, env, max(left, 1.0), log)
        outcome.seconds += seconds
        if status != 0:
            outcome.status = "timed out" if status is None else "failed"
            outcome.detail.append(f"{label} {outcome.status} (see gpu-install.log)")
            return outcome
        outcome.detail.append(f"{label}: {seconds:.1f} s")
    report = json.loads(log.read_text().strip().splitlines()[-1])
    outcome.detail.append(f"torch {report['torch']} (CUDA available: {report['cuda']}) from {report['torch_file']}")
    installed = ", ".join(f"{name} {version}" for name, version in report["installed"].items())
    outcome.detail.append(f"installed: {installed}")
    if report["missing"]:
        outcome.status = "failed"
        outcome.detail.append("missing requirements (add them to make gpu-wheels): " + ", ".join(report["missing"]))
        return outcome
    outcome.status = "ok"
    return outcome


def tests(site: Path, python: str, out: Path, budget_s: float, dry_run: bool, env: dict[str, str]) -> Outcome:
    outcome = Outcome("tests")
    log = out / "gpu-tests.log"
    # pytest-timeout's --timeout and pytest-xdist's --dist are named in the dry run too, so it proves they are there.
    command = [python, "-m", "pytest", "-m", "gpu", *GPU_TESTS, "--timeout=140", "--dist", "loadfile"]
    if dry_run:
        command += ["--collect-only", "-q", "-n", "0"]
    else:
        command += ["-q", "-rA", "--durations=0", f"--junitxml={out / 'gpu-junit.xml'}", "-n", str(TEST_WORKERS)]
    status, outcome.seconds = run_phase(command, env, budget_s, log)
    if dry_run:
        collected = [line for line in log.read_text().splitlines() if "::" in line and not line.startswith("$")]
        outcome.detail = [f"would run {len(collected)} tests:", *collected]
        outcome.status = "ok" if status == 0 and collected else "failed"
        return outcome
    outcome.detail = junit_summary(out / "gpu-junit.xml")
    outcome.status = {None: "timed out", 0: "ok"}.get(status, "failed")
    if outcome.status == "ok" and " 0 passed," in outcome.detail[0]:
        outcome.status = "failed"  # every test skipped: this machine has no usable CUDA device
        outcome.detail.insert(0, "no test ran: torch sees no CUDA device here")
    return outcome


def junit_summary(path: Path) -> list[str]:
    if not path.exists():
        return ["no JUnit file (pytest was killed or did not start): see gpu-tests.log"]
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return ["the JUnit file holds no test suite"]
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    lines = [f"{counts['tests']} tests: {counts['tests'] - counts['failures'] - counts['errors'] - counts['skipped']} "
             f"passed, {counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} skipped "
             f"({float(suite.get('time', '0')):.1f} s)"]
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                message = (element.get("message") or element.text or "").strip().replace("\n", " ")[:400]
                lines.append(f"{kind.upper()} {name} ({float(case.get('time', '0')):.1f} s): {message}")
                break
        else:
            lines.append(f"passed {name} ({float(case.get('time', '0')):.1f} s)")
    return lines


def bench(python: str, out: Path, budget_s: float, dry_run: bool, env: dict[str, str]) -> Outcome:
    outcome = Outcome("bench")
    log = out / "gpu-bench.log"
    command = [python, "-m", "bench.gpu_gpt", "--out", str(out)]
    # The benchmark stops itself 20 s before the phase's budget and writes what it measured.
    command += ["--list"] if dry_run else ["--budget", f"{budget_s - 20:.0f}"]
    status, outcome.seconds = run_phase(command, env, budget_s, log)
    outcome.status = {None: "timed out", 0: "ok"}.get(status, "failed")
    if dry_run:
        outcome.detail = [line for line in log.read_text().splitlines() if not line.startswith("$")]
    else:
        results = out / "gpu-results.md"
        outcome.detail = [f"results: {results.name} / gpu-results.json" if results.exists() else "no results written"]
    return outcome


# ---------------------------------------------------------------------------------------------------- reporting


def write_summary(out: Path, outcomes: list[Outcome], dry_run: bool, started: float, budgets: dict[str, float]) -> None:
    lines = [f"# GPU check{' (dry run)' if dry_run else ''}", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", f"- python: {sys.executable} {sys.version.split()[0]}",
             f"- wall time so far: {time.perf_counter() - started:.0f} s (plan {planned_total():.0f} s, limit "
             f"{LIMIT_S:.0f} s)", "", "| phase | status | seconds | budget |", "|---|---|---:|---:|"]
    lines += [f"| {o.name} | {o.status} | {o.seconds:.1f} | {budgets[o.name]:.0f} |" for o in outcomes]
    for outcome in outcomes:
        if outcome.detail:
            lines += ["", f"## {outcome.name}", "", *(f"    {line}" for line in outcome.detail)]
    bench_md = out / "gpu-results.md"
    if bench_md.exists() and not dry_run:
        lines += ["", bench_md.read_text()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check-summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="where every result file goes (default: a temp dir)")
    parser.add_argument("--dry-run", action="store_true", help="install into a temporary target and list the plan")
    parser.add_argument("--only", default="tests,bench", help="phases after install (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that holds torch")
    parser.add_argument("--budget-scale", type=float, default=1.0,
                        help="multiply every phase's budget (a slower machine; the 8-minute plan is for the GPU one)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    assert planned_total() <= LIMIT_S, f"the plan ({planned_total():.0f} s) does not fit {LIMIT_S:.0f} s"
    print_plan()
    out = (args.out or Path(tempfile.mkdtemp(prefix="core-gpu-check-out-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="core-gpu-check-"))
    site, build = scratch / "site", scratch / "build"
    # A dry run proves the script works, not the GPU machine's timing: on a busy 2-core CI machine the same install
    # took 27 s of wall time for 4 s of CPU, so its phases get a looser limit.
    budgets = {phase.name: max(phase.budget_s, DRY_RUN_BUDGET_S) if args.dry_run else phase.budget_s * args.budget_scale
               for phase in PLAN}
    outcomes = [install(site, build, args.python, out / "gpu-install.log", budgets["install"], args.dry_run)]
    write_summary(out, outcomes, args.dry_run, started, budgets)
    try:
        if outcomes[0].status == "ok":
            env = environment(site, {"TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor")})
            selected = [name for name in args.only.split(",") if name]
            if "tests" in selected:
                outcomes.append(tests(site, args.python, out, budgets["tests"], args.dry_run, env))
                write_summary(out, outcomes, args.dry_run, started, budgets)
            if "bench" in selected:
                outcomes.append(bench(args.python, out, budgets["bench"], args.dry_run, env))
                write_summary(out, outcomes, args.dry_run, started, budgets)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{(out / 'gpu-check-summary.md').read_text()}", flush=True)
    print(f"[gpu-check] {time.perf_counter() - started:.0f} s in all; files in {out}: "
          f"{', '.join(sorted(path.name for path in out.iterdir()))}", flush=True)
    return 0 if all(outcome.status == "ok" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
