"""Fixtures shared by the core's tests.

`installed` creates real distributions: a ``*.dist-info`` directory with ``METADATA`` and
``entry_points.txt`` plus the plugin's module, on a temporary ``sys.path`` entry. ``importlib.metadata``
finds them exactly as it finds pip-installed packages; nothing in the metadata machinery is patched.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from core._records import ENTRY_POINT_GROUPS


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
