"""Fixtures shared by the core's tests.

`installed` creates real distributions: a ``*.dist-info`` directory with ``METADATA`` and
``entry_points.txt`` plus the plugin's module, on a temporary ``sys.path`` entry. ``importlib.metadata``
finds them exactly as it finds pip-installed packages; nothing in the metadata machinery is patched.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import runpy
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from core._records import ENTRY_POINT_GROUPS

LAUNCH_VARIABLES = frozenset({
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
    "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "CORE_DDP_JOB", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID",
})
"""What a launch sets in each rank: a job a test starts must not inherit them from a surrounding run."""


NEEDS_DDP = pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
DDP_JOBS = [pytest.mark.slow, pytest.mark.distributed, NEEDS_DDP]
"""The marks of a test file whose jobs start processes with core-ddp: ``pytestmark = DDP_JOBS``."""


def job_environment(omp_threads: str | None = "1") -> dict[str, str]:
    """The environment for a job a test starts: this process's, without :data:`LAUNCH_VARIABLES` (so the job
    starts its own ranks), with ``OMP_NUM_THREADS`` set (one thread per process on this 2-core machine) unless
    ``omp_threads`` is None."""
    environment = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    if omp_threads is not None:
        environment["OMP_NUM_THREADS"] = omp_threads
    return environment


class Installer:
    """Writes throwaway distributions into one site directory that is on ``sys.path``."""

    def __init__(self, site: Path) -> None:
        self.site = site

    def __call__(
        self,
        name: str,
        entry_points: Mapping[str, Mapping[str, str]],
        modules: Mapping[str, str] | None = None,
        version: str = "1.0.0",
        requires: tuple[str, ...] = ("core>=0.1,<0.2",),
    ) -> Path:
        """Install distribution ``name``: ``entry_points`` maps a kind to {alias: "module:factory"}."""
        for module_name, source in (modules or {}).items():
            path = self.site / (module_name.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        info = self.site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        metadata += [f"Requires-Dist: {requirement}" for requirement in requires]
        (info / "METADATA").write_text("\n".join(metadata) + "\n")
        sections = []
        for kind, aliases in entry_points.items():
            lines = [f"[{ENTRY_POINT_GROUPS[kind]}]"] + [f"{alias} = {target}" for alias, target in aliases.items()]
            sections.append("\n".join(lines))
        (info / "entry_points.txt").write_text("\n\n".join(sections) + "\n")
        importlib.invalidate_caches()
        return info

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess that must see the same distributions."""
        path = os.pathsep.join([str(self.site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return {**os.environ, "PYTHONPATH": path}


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for variable in ("CORE_STRICT_PLUGINS", "CORE_DISABLE_PLUGINS", "CORE_PLUGINS_AUTOLOAD"):
        monkeypatch.delenv(variable, raising=False)
    before = set(sys.modules)
    yield Installer(site)
    # Forget the throwaway plugin modules so the next test can define the same names differently.
    for module_name in set(sys.modules) - before:
        module = sys.modules[module_name]
        if str(getattr(module, "__file__", "") or "").startswith(str(site)):
            del sys.modules[module_name]
    importlib.invalidate_caches()


# A minimal valid plugin of each kind, for tests that need a third-party one. Each is the smallest
# object that satisfies core/hookspecs.py's REQUIRED_HOOKS for its kind.
PLUGIN_SOURCES = {
    "strategy": '''
        from core import hookimpl

        class Strategy:
            kind = "strategy"
            max_processes = None

            def __init__(self, name="{alias}", supports=None):
                self.name = name
                if supports is not None:
                    self.supports = supports

            @hookimpl
            def strategy_launch(self, function, args, kwargs):
                return function(*args, **kwargs)

            @hookimpl
            def strategy_setup_module(self, module):
                return module

            @hookimpl
            def strategy_reduce(self, tensor, group, reduce_op):
                return tensor

            @hookimpl
            def strategy_all_gather(self, tensor, group, sync_grads):
                return tensor

            @hookimpl
            def strategy_broadcast(self, obj, src):
                return obj

            @hookimpl
            def strategy_barrier(self, name):
                return None

        def factory():
            return Strategy()
    ''',
}


def plugin_source(kind: str, alias: str) -> str:
    return textwrap.dedent(PLUGIN_SOURCES[kind]).replace("{alias}", alias)


# ------------------------------------------------------------------------------------------ the order of the files
# `make unit` runs whole files on two pytest-xdist workers (--dist loadfile) and hands a worker the next file when
# it is nearly done with its own. Handed out by xdist's default order (the files with the most tests first), the
# heaviest files, which have few tests each (the bench smoke test has one), came last: one worker ran them while
# the other had nothing left to do. `make unit` passes --no-loadscope-reorder, and the workers' collection (this
# hook) puts the files in decreasing order of cost, so that what is left at the end is short. Only the order
# changes: every file still runs whole on one worker, each file's tests in their own order.
#
# The files below cost far more than their number of tests says (seconds of worker time in a full `make unit`
# on the 2-core CI machine, 2026-12-05; keep the list to files of 30 s or more). Every other file is estimated
# from its tests: a test marked `distributed` starts processes (a few seconds), any other test runs in the worker
# (a fraction of a second).
HEAVY_FILES = {
    "tests/test_bench_smoke.py": 330.0,
    "tests/migration/test_migration.py": 90.0,
    "tests/migration/test_corpus.py": 175.0,
    "tests/test_doc_blocks.py": 190.0,
    "tests/test_docs_site.py": 60.0,
    "plugins/core-deepspeed/tests/test_deepspeed_training.py": 115.0,
    "contrib/core-ray/tests/test_ray_jobs.py": 165.0,
    "contrib/core-ray/tests/test_ray_conformance.py": 60.0,
    "contrib/core-torchft/tests/test_torchft_replicas.py": 80.0,
    "contrib/core-diloco/tests/test_diloco_training.py": 35.0,
    "plugins/core-ddp/tests/test_ddp_clean_exit.py": 45.0,
    "tests/test_dist.py": 170.0,
    "tests/test_gpu_check.py": 45.0,
    "tests/test_activation_checkpointing_jobs.py": 145.0,
    "plugins/core-slurm/tests/test_slurm_preemption.py": 110.0,
    "tests/test_template.py": 85.0,
    "tests/test_conformance_kit.py": 40.0,
    "plugins/core-safetensors/tests/test_safetensors_layouts.py": 35.0,
    "tests/test_litgpt.py": 120.0,  # litgpt compiles its model: 120-170 s with a cold inductor cache, 70 s warm
}
DISTRIBUTED_TEST_COST = 3.0
OTHER_TEST_COST = 0.05


def _file_of(item: pytest.Item, root: Path) -> str:
    path = Path(str(item.path)).resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()


def file_costs(items: list[pytest.Item], root: Path) -> dict[str, float]:
    """Estimated seconds per test file (its path from the root): HEAVY_FILES, else the sum over its tests."""
    costs: dict[str, float] = {}
    for item in items:
        name = _file_of(item, root)
        cost = DISTRIBUTED_TEST_COST if item.get_closest_marker("distributed") else OTHER_TEST_COST
        costs[name] = costs.get(name, 0.0) + cost
    return {name: HEAVY_FILES.get(name, cost) for name, cost in costs.items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker only: the files heaviest first, each file's tests together and in their order."""
    if not hasattr(config, "workerinput"):
        return  # a plain `pytest` run keeps pytest's order
    root = Path(str(config.rootpath)).resolve()
    names = [_file_of(item, root) for item in items]
    costs = file_costs(items, root)
    first = {name: index for index, name in reversed(list(enumerate(names)))}
    order = sorted(range(len(items)), key=lambda index: (-costs[names[index]], first[names[index]], index))
    items[:] = [items[index] for index in order]


SITE = Path(__file__).parent / "site"


def pytest_configure(config: pytest.Config) -> None:
    """Every process the tests start imports tests/site/sitecustomize.py first (fewer garbage collections while
    torch imports: see its docstring); a test that builds its environment without PYTHONPATH goes without."""
    paths = [str(SITE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    runpy.run_path(str(SITE / "sitecustomize.py"))  # this pytest process too (it started before the path was set)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Out of the cyclic garbage collector's reach: what the collection imported (torch, the plugins, the test
    modules) lives as long as the pytest process anyway. Every full collection during the tests, and the exit,
    then skips those objects: an in-process test file (tests/test_trainer.py with tests/test_callbacks.py) used
    about 20 % less CPU. Objects the tests create are collected as before."""
    gc.freeze()


SERIAL_FILES_VARIABLE = "CORE_SERIAL_FILES"
"""Where the parallel phase of `make unit` writes the files of the `serial` tests it deselected (one list per process,
``<value>.<worker>``), so that the serial phase collects those files only, not the whole suite again (about 20 s of
one core: torch, hypothesis and 2200 tests' collection)."""
_serial_files: set[str] = set()


def pytest_deselected(items: list[pytest.Item]) -> None:
    target = os.environ.get(SERIAL_FILES_VARIABLE)
    if not target:
        return
    _serial_files.update(str(item.path) for item in items if item.get_closest_marker("serial"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(f"{target}.{worker}").write_text("".join(f"{name}\n" for name in sorted(_serial_files)))
