"""Every code block of README.md and docs/*.md runs as printed, or says why not.

The rules (CONTRIBUTING.md, "Writing docs", says the same for writers):

* Every fence names its language. ``python``, ``bash``/``sh`` and ``console`` blocks are run; ``toml``,
  ``yaml`` and ``json`` blocks are parsed; anything else (``text``: output, file layouts, synopses) is shown only.
* A block is not run when an HTML comment line directly above its opening fence says ``<!-- fragment -->`` or
  ``<!-- fragment: why -->`` (an excerpt, a cluster command, ``pip install``).
* ``<!-- run: torchrun N -->`` above a python block runs it under ``torchrun --standalone --nproc-per-node N``
  instead of ``python``; a script that starts its own processes (``Lite(strategy="ddp", devices=2)``) needs nothing.
* The blocks of one page run in order, each as a standalone program (never a shared namespace), in one temporary
  directory of their own that is not the clone, on CPU: files one block writes are there for the next. A python
  block whose first line is ``# NAME.py`` (or ``# NAME.py: ...``) is saved as NAME.py; when a later shell block of
  the page runs that file, the block is only saved, else it runs too.
* A console block runs its ``$ `` lines; a bash block runs as a ``bash -eo pipefail`` script. ``python``,
  ``pytest`` and ``torchrun`` are this interpreter's; ``pip``, ``make``, the schedulers and ``python -m pip`` are
  stubs that fail (REFUSED): a block never changes the machine or the venv.

Two pages run at once (each block starts up to two processes of its own); every block has BLOCK_TIMEOUT seconds.
Some blocks' output is checked too (the README example's loss falls, the N-D examples' layout is what they say).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "bash", "sh", "console"}
PARSE = {"toml", "yaml", "json"}
BLOCK_TIMEOUT = 120.0
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<language>[^`\s]*)[^`]*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*(?P<name>fragment|run)\s*(?::\s*(?P<value>.*?))?\s*-->\s*$")
SCRIPT_NAME = re.compile(r"^# (?P<name>[\w.-]+\.py)(?::.*)?$")
TORCHRUN = re.compile(r"^torchrun (?P<processes>[1-9])$")
# Commands a block must never run from the tests: they change this machine (the shared venv, the system) or need a
# cluster. In a shell block each is a stub that fails, naming the block to mark as a fragment.
REFUSED = ("pip", "pip3", "uv", "conda", "make", "sudo", "apt", "apt-get", "twine", "git", "docker", "kubectl",
           "sbatch", "srun", "salloc", "scancel", "bsub", "jsrun", "flux")
STUB = """#!/bin/sh
echo "test_doc_blocks: '$(basename "$0") $*' is not run by the tests (it would change this machine or needs a \
cluster): mark the block <!-- fragment: why -->" >&2
exit 97
"""
# A rank or rendezvous left in this environment (a test run under torchrun) must not reach the blocks.
LAUNCH_VARIABLES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the root
    line: int  # of the opening fence, 1-based
    language: str
    source: str
    fragment: str | None  # the reason ("" when none is given); None: not a fragment
    run: str | None  # the value of <!-- run: ... -->

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def script_name(self) -> str | None:
        first = self.source.split("\n", 1)[0]
        found = SCRIPT_NAME.match(first) if self.language == "python" else None
        return found.group("name") if found else None

    @property
    def runnable(self) -> bool:
        return self.fragment is None and self.language in RUN

    @property
    def commands(self) -> str:
        """A shell block as a bash script: a console block's ``$ `` lines, a bash block whole."""
        if self.language == "console":
            return "\n".join(line[2:] for line in self.source.splitlines() if line.startswith("$ "))
        return self.source


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening.group("fence"), opening.group("indent")
        end = index + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence)
                                        and not lines[end].strip().strip(fence[0]).strip()):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[index + 1:end]]
        directives: dict[str, str] = {}
        above = index - 1
        while above >= 0 and (directive := DIRECTIVE.match(lines[above])):
            directives.setdefault(directive.group("name"), directive.group("value") or "")
            above -= 1
        found.append(Block(
            page=page.relative_to(ROOT).as_posix(), line=index + 1, language=opening.group("language").lower(),
            source="\n".join(body) + "\n", fragment=directives.get("fragment"), run=directives.get("run"),
        ))
        index = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]
BY_ID = {block.id: block for block in BLOCKS}


@dataclass
class Outcome:
    command: list[str]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    def report(self) -> str:
        ended = f"killed after {BLOCK_TIMEOUT:.0f} s" if self.returncode is None else f"exit code {self.returncode}"
        return (f"{' '.join(self.command)}: {ended} in {self.seconds:.1f} s\n--- stdout (end)\n{self.stdout[-3000:]}"
                f"\n--- stderr (end)\n{self.stderr[-5000:]}")


def stubs(directory: Path) -> Path:
    """A directory of stubs for REFUSED, first on the blocks' PATH."""
    folder = directory.parent / "refused-commands"
    folder.mkdir(exist_ok=True)
    for name in REFUSED:
        stub = folder / name
        if not stub.exists():
            stub.write_text(STUB)
            stub.chmod(0o755)
    shadow = folder / "python" / "pip"  # `python -m pip` too
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text(
        "raise SystemExit(\"test_doc_blocks: 'python -m pip' is not run by the tests: mark the block "
        "<!-- fragment: why -->\")\n"
    )
    return folder


def environment(directory: Path) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    binaries = str(Path(sys.executable).parent)
    refused = stubs(directory)
    path = os.pathsep.join([str(refused), binaries, base.get("PATH", "")])
    python_path = os.pathsep.join(filter(None, [str(refused / "python"), base.get("PYTHONPATH")]))
    return {**base, "PATH": path, "PYTHONPATH": python_path, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "TMPDIR": str(directory), "CUDA_VISIBLE_DEVICES": ""}


def execute(command: list[str], directory: Path) -> Outcome:
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=directory, env=environment(directory), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the block and every process it started
        stdout, stderr = process.communicate()
        returncode = None
    finally:
        with contextlib.suppress(ProcessLookupError):  # a rank the block left behind
            os.killpg(process.pid, signal.SIGKILL)
    return Outcome(command, returncode, stdout, stderr, time.monotonic() - started)


def command_for(block: Block, directory: Path) -> list[str]:
    if block.language in {"bash", "sh", "console"}:
        script = directory / f"block_{block.line}.sh"
        script.write_text(block.commands)
        return ["bash", "-eo", "pipefail", script.name]
    script = directory / (block.script_name or f"block_{block.line}.py")
    script.write_text(block.source)
    if block.run is not None:
        processes = TORCHRUN.match(block.run)
        assert processes, f"{block.id}: unknown <!-- run: {block.run} -->; known: 'torchrun N'"
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                processes.group("processes"), script.name]
    return [sys.executable, script.name]


def run_later(block: Block, page: list[Block]) -> bool:
    """A named script that a later shell block of its page runs is only saved."""
    name = block.script_name
    later = page[page.index(block) + 1:]
    return name is not None and any(
        other.runnable and other.language != "python" and re.search(rf"\b{re.escape(name)}\b", other.commands)
        for other in later
    )


def run_page(page: list[Block], directory: Path) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for block in page:
        if not block.runnable:
            continue
        command = command_for(block, directory)
        if block.language == "python" and run_later(block, page):
            outcomes[block.id] = Outcome(["(saved as)", command[-1]], 0, "", "", 0.0)
            continue
        outcomes[block.id] = execute(command, directory)
    return outcomes


@dataclass
class Runs:
    """The pages' runs, two at a time, started when the first test asks for one."""

    root: Path
    pages: list[str]
    futures: dict[str, Future[dict[str, Outcome]]] = field(default_factory=dict)

    def start(self) -> ThreadPoolExecutor:
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="doc-blocks")
        # The longest pages first, so the two workers end together.
        weight = {page: sum(len(block.source) for block in BLOCKS if block.page == page and block.runnable)
                  for page in self.pages}
        for page in sorted(self.pages, key=lambda name: -weight[name]):
            directory = self.directory(page)
            directory.mkdir(parents=True)
            page_blocks = [block for block in BLOCKS if block.page == page]
            self.futures[page] = pool.submit(run_page, page_blocks, directory)
        return pool

    def outcome(self, block: Block) -> Outcome:
        return self.futures[block.page].result()[block.id]

    def directory(self, page: str) -> Path:
        return self.root / page.replace("/", "_").removesuffix(".md")


RUNNABLE = [block for block in BLOCKS if block.runnable]
# The tests at the end of this file that read a page's output: the page runs for them even when -k deselects
# its blocks' own tests.
OUTPUT_TESTS = {"README.md": "readme_example", "docs/lite.md": "lite_conversion_guide",
                "docs/parallelism.md": "_example"}
PARSED = [block for block in BLOCKS if block.fragment is None and block.language in PARSE]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Runs]:
    # Only the pages whose blocks this session will test (all of them, unless -k narrows it).
    mine = [item for item in request.session.items if item.path == request.path]
    wanted = {BY_ID[item.callspec.params["block_id"]].page for item in mine
              if hasattr(item, "callspec") and "block_id" in item.callspec.params}
    wanted |= {page for item in mine for page, test in OUTPUT_TESTS.items() if test in item.name}
    runs = Runs(tmp_path_factory.mktemp("doc-blocks"), sorted(wanted))
    pool = runs.start()
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)
    summary = tmp_path_factory.getbasetemp() / "doc-blocks-times.json"
    finished = {block.id: round(runs.outcome(block).seconds, 1) for block in RUNNABLE
                if block.page in runs.futures and runs.futures[block.page].done()
                and not runs.futures[block.page].exception()}
    summary.write_text(json.dumps(finished, indent=1))


def test_every_fence_names_its_language_and_every_directive_is_known() -> None:
    untagged = [block.id for block in BLOCKS if not block.language]
    assert not untagged, (f"these blocks have no language: tag them ```text (output, layouts), ```bash, ```python ...: "
                          f"{untagged}")
    misplaced = [block.id for block in BLOCKS
                 if block.run is not None and (block.language != "python" or block.fragment is not None)]
    assert not misplaced, f"<!-- run: ... --> is for python blocks that are run: {misplaced}"
    for block in BLOCKS:
        if block.run is not None:
            assert TORCHRUN.match(block.run), f"{block.id}: unknown <!-- run: {block.run} -->; known: 'torchrun N'"
    stray = []
    for page in PAGES:
        lines = page.read_text().split("\n")
        stray += [f"{page.relative_to(ROOT)}:{number}" for number, line in enumerate(lines[:-1], 1)
                  if DIRECTIVE.match(line) and not (DIRECTIVE.match(lines[number]) or FENCE.match(lines[number]))]
    assert not stray, f"a <!-- fragment --> or <!-- run --> line must sit directly above a fence: {stray}"


def test_the_pages_have_blocks_of_each_kind() -> None:
    # The extraction itself: a change to the fence pattern that found nothing would pass every other test.
    languages = {block.language for block in BLOCKS}
    assert {"python", "bash", "console", "toml"} <= languages, languages
    assert len(RUNNABLE) >= 20 and len([block for block in BLOCKS if block.fragment is not None]) >= 20
    assert any(block.script_name == "pipeline_trainer.py" for block in RUNNABLE)


@pytest.mark.parametrize("block_id", [block.id for block in PARSED])
def test_config_block_parses(block_id: str) -> None:
    block = BY_ID[block_id]
    if block.language == "toml":
        tomllib = pytest.importorskip("tomllib", reason="Python < 3.11 has no TOML parser in its standard library")
        tomllib.loads(block.source)
    elif block.language == "yaml":
        yaml.safe_load(block.source)
    else:
        json.loads(block.source)


@pytest.mark.distributed
@pytest.mark.timeout(900)
@pytest.mark.parametrize("block_id", [block.id for block in RUNNABLE])
def test_block_runs_as_printed(block_id: str, runs: Runs) -> None:
    outcome = runs.outcome(BY_ID[block_id])
    assert outcome.returncode == 0, f"{block_id} does not run as printed:\n{outcome.report()}"


# What some blocks print is checked too: the output they describe, not just their exit code.


def block_with(page: str, needle: str) -> Block:
    found = [block for block in RUNNABLE if block.page == page and needle in block.source]
    assert len(found) == 1, f"{page}: expected one runnable block containing {needle!r}, found {len(found)}"
    return found[0]


def printed(runs: Runs, page: str, needle: str) -> list[str]:
    outcome = runs.outcome(block_with(page, needle))
    assert outcome.returncode == 0, outcome.report()
    return outcome.stdout.splitlines()


def falling(lines: list[str], prefix: str, expected: list[int], factor: float) -> None:
    rows = [line for line in lines if line.startswith(prefix + " ")]
    assert [int(row.split(":")[0].split()[1]) for row in rows] == expected, lines  # printed once: by rank 0
    losses = [float(row.rsplit(" ", 1)[1]) for row in rows]
    assert losses[-1] < losses[0] / factor, losses


@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_the_readme_example_trains_on_two_ddp_processes(runs: Runs) -> None:
    falling(printed(runs, "README.md", "def train(lite: Lite"), "epoch", list(range(10)), 1.5)


@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_both_loops_of_the_lite_conversion_guide_reach_the_same_accuracy(runs: Runs) -> None:
    for needle in ("def train(epochs=20)", "def train(lite, epochs=20)"):
        (accuracy,) = re.findall(r"^test accuracy: (\d\.\d{4})$", "\n".join(printed(runs, "docs/lite.md", needle)),
                                 flags=re.MULTILINE)
        assert float(accuracy) >= 0.93, (needle, accuracy)


@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_the_tensor_parallel_example_trains_and_writes_a_sharded_checkpoint(runs: Runs) -> None:
    lines = printed(runs, "docs/parallelism.md", "# tensor_parallel_lite.py")
    assert any(line.startswith("DeviceMesh((data_parallel=1, tensor_parallel=2)") for line in lines), lines
    falling(lines, "step", [0, 10, 20, 30, 39], 4)
    assert (runs.directory("docs/parallelism.md") / "tensor_parallel.ckpt").is_dir()


@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_the_pipeline_examples_train_with_each_rank_holding_its_stage(runs: Runs) -> None:
    lines = printed(runs, "docs/parallelism.md", "# pipeline_lite.py")
    # lite.print prints on rank 0 only: rank 0 holds layers 0 and 1, not the head (stage 1's).
    assert "rank 0 holds ['layers.0', 'layers.1']" in lines, lines
    falling(lines, "step", [0, 10, 20, 30, 39], 4)
    lines = printed(runs, "docs/parallelism.md", "# pipeline_trainer.py")
    falling(lines, "epoch", [0, 10, 20, 30, 39], 4)
    assert "checkpoint holds ['head', 'layers']" in lines, lines  # rank 0 held no head, its checkpoint does
