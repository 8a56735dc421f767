"""How the hook contract evolves: deprecated hooks warn and are listed, unknown hooks are refused and listed.

The deprecated hook used here does not exist in the contract: each test adds it to ``core.hookspecs`` for
its own duration, declared exactly as a real deprecation would be (``warn_on_impl=deprecated(...)``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from conftest import Installer, plugin_source

import core
from core import hookspecs
from core._markers import hookspec
from core.hookspecs import CONTRACT_VERSION, deprecated
from core.plugins import _cli
from core.plugins._contract import inspect_contract

LEGACY_WARNING = deprecated("strategy_legacy_step", since=CONTRACT_VERSION, instead="implement strategy_backward")

LEGACY_METHOD = """
    @hookimpl
    def strategy_legacy_step(self, optimizer):
        return None
"""

FUTURE_METHOD = """
    @hookimpl
    def strategy_from_the_future(self, module):
        return module

    contract_version = {version}
"""


def _with_methods(alias: str, methods: str) -> str:
    """The minimal strategy of conftest with extra class-body lines (``methods`` is indented for a class)."""
    source = plugin_source("strategy", alias)
    head, _, tail = source.partition("\ndef factory():")
    return head.rstrip() + "\n" + textwrap.indent(textwrap.dedent(methods), "    ") + "\n\ndef factory():" + tail


@pytest.fixture
def legacy_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def strategy_legacy_step(optimizer: object) -> None:
        """A hook that a later contract deprecated."""

    spec = hookspec(firstresult=True, warn_on_impl=LEGACY_WARNING)(strategy_legacy_step)
    monkeypatch.setattr(hookspecs, "strategy_legacy_step", spec, raising=False)
    yield


def _load_object(installed: Installer, dist: str, alias: str, methods: str) -> object:
    module = f"{dist.replace('-', '_')}_plugin"
    installed(dist, {"strategy": {alias: f"{module}:factory"}}, {module: _with_methods(alias, methods)})
    return __import__(module).factory()


def test_the_deprecation_warning_names_the_hook_the_version_and_the_way_out() -> None:
    assert isinstance(LEGACY_WARNING, core.CoreDeprecationWarning)
    assert str(LEGACY_WARNING) == (
        f"The hook 'strategy_legacy_step' is deprecated since contract version {CONTRACT_VERSION} and will be "
        "removed in the next breaking release of core; implement strategy_backward."
    )


def test_every_plugin_of_the_project_implements_only_current_hooks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core.plugins", "--check", "--json"], capture_output=True, text=True, timeout=120
    )
    payload = json.loads(result.stdout)
    assert payload["contract_version"] == CONTRACT_VERSION
    flagged = {
        f"{row['distribution']}:{row['alias']}": row["contract"]
        for row in payload["plugins"]
        if row["contract"] and (row["contract"]["deprecated"] or row["contract"]["unknown"])
    }
    assert flagged == {}


def test_a_run_warns_when_a_plugin_implements_a_deprecated_hook(installed: Installer, legacy_hook: None) -> None:
    plugin = _load_object(installed, "core-legacy", "legacy", LEGACY_METHOD)
    with pytest.warns(core.CoreDeprecationWarning, match="'strategy_legacy_step' is deprecated since contract"):
        active = core.resolve(accelerator="cpu", strategy=plugin, devices=1, plugins=["local"])
    assert active.strategy is plugin  # deprecated still works


def test_check_lists_the_plugins_that_implement_a_deprecated_hook(
    installed: Installer, legacy_hook: None, capsys: pytest.CaptureFixture[str]
) -> None:
    installed(
        "core-legacy", {"strategy": {"legacy": "legacy_plugin:factory"}},
        {"legacy_plugin": _with_methods("legacy", LEGACY_METHOD)},
    )
    with pytest.warns(core.CoreDeprecationWarning):
        status = _cli.main(["--check", "--kind", "strategy"])
    out = capsys.readouterr().out
    assert status == 0, out
    legacy_row = next(line for line in out.splitlines() if line.startswith("strategy") and " legacy " in line)
    assert "usable" in legacy_row
    assert f"hook contract: version {CONTRACT_VERSION}" in out
    assert (
        "  strategy 'legacy' (core-legacy 1.0.0): implements the deprecated hook strategy_legacy_step: "
        f"{LEGACY_WARNING}"
    ) in out

    with pytest.warns(core.CoreDeprecationWarning):
        _cli.main(["--check", "--json", "--kind", "strategy"])
    rows = json.loads(capsys.readouterr().out)["plugins"]
    contract = next(row["contract"] for row in rows if row["alias"] == "legacy")
    assert contract == {
        "declared": None,
        "deprecated": [{"hook": "strategy_legacy_step", "message": str(LEGACY_WARNING)}],
        "unknown": [],
    }


def test_a_hook_unknown_to_this_core_is_refused_and_reported(installed: Installer) -> None:
    future = FUTURE_METHOD.format(version=CONTRACT_VERSION + 1)
    plugin = _load_object(installed, "core-future", "future", future)
    with pytest.raises(core.BrokenPluginError, match=r"does not define: \['strategy_from_the_future'\]"):
        core.resolve(accelerator="cpu", strategy=plugin, devices=1, plugins=["local"])

    result = subprocess.run(
        [sys.executable, "-m", "core.plugins", "--check", "--kind", "strategy"],
        capture_output=True, text=True, env=installed.env, timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if " future " in line)
    assert row.split()[4] == "broken"  # the reason is below the table, and whole in the contract notes
    prefix = "  strategy 'future' (core-future 1.0.0): "
    assert (
        f"{prefix}implements hooks unknown to this core (contract {CONTRACT_VERSION}): strategy_from_the_future"
    ) in result.stdout
    assert (
        f"{prefix}written for contract {CONTRACT_VERSION + 1}, newer than this core's {CONTRACT_VERSION}: "
        "upgrade core (pip install --upgrade core)"
    ) in result.stdout

    shown = subprocess.run(
        [sys.executable, "-m", "core.plugins", "show", "future"],
        capture_output=True, text=True, env=installed.env, timeout=120,
    )
    assert "contract:      implements hooks unknown to this core" in shown.stdout


def test_a_deprecated_argument_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    warning = core.CoreDeprecationWarning("the name argument of strategy_barrier is going away")

    def strategy_barrier(name: str | None) -> None:
        """A barrier whose argument a later contract deprecated."""

    monkeypatch.setattr(
        hookspecs, "strategy_barrier",
        hookspec(firstresult=True, warn_on_impl_args={"name": warning})(strategy_barrier),
    )

    class Strategy:
        kind = "strategy"

        @core.hookimpl
        def strategy_barrier(self, name: str | None) -> None:
            return None

    class Quiet:
        kind = "strategy"

        @core.hookimpl
        def strategy_barrier(self) -> None:
            return None

    assert inspect_contract(Strategy()).deprecated == (("strategy_barrier(name=...)", str(warning)),)
    assert inspect_contract(Quiet()).deprecated == ()
