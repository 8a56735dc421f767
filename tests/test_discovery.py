"""Discovery reads real installed distributions: built-ins, conflicts, pins, versions, broken and blocked plugins."""

from __future__ import annotations

import pytest
from conftest import Installer, plugin_source

import core
from core.registry._discovery import discover


def _strategy_dist(installed: Installer, dist: str, module: str, alias: str = "fancy", **kwargs: object) -> None:
    installed(
        dist,
        {"strategy": {alias: f"{module}:factory"}},
        {module: plugin_source("strategy", alias)},
        **kwargs,  # type: ignore[arg-type]
    )


def test_builtins_are_listed_with_their_distribution() -> None:
    catalog = discover()
    found = {(info.kind, info.alias): info for info in catalog.entries}
    for kind, alias in [
        ("accelerator", "cpu"),
        ("strategy", "single_device"),
        ("precision", "32-true"),
        ("precision", "32"),
        ("precision", "64-true"),
        ("precision", "16-true"),
        ("precision", "bf16-true"),
        ("environment", "local"),
        ("checkpoint_io", "torch"),
    ]:
        info = found[(kind, alias)]
        assert info.distribution == "core"
        assert info.version == core.__version__
        assert info.status == "ok"
        assert info.target.startswith("core.builtin.")


def test_third_party_plugin_is_selectable_by_alias(installed: Installer) -> None:
    _strategy_dist(installed, "core-fancy", "fancy_plugin")
    active = core.resolve(strategy="fancy")
    assert active.config.strategy == "fancy"
    assert active.config.distributions["strategy"] == "core-fancy"
    assert type(active.strategy).__module__ == "fancy_plugin"


def test_same_alias_from_two_distributions_is_a_conflict_naming_both(installed: Installer) -> None:
    _strategy_dist(installed, "core-fancy-a", "fancy_a")
    _strategy_dist(installed, "core-fancy-b", "fancy_b")
    statuses = {info.distribution: info.status for info in discover().of_kind("strategy") if info.alias == "fancy"}
    assert statuses == {"core-fancy-a": "conflict", "core-fancy-b": "conflict"}
    with pytest.raises(core.PluginConflictError) as excinfo:
        core.resolve(strategy="fancy")
    message = str(excinfo.value)
    assert "core-fancy-a" in message and "core-fancy-b" in message and "'fancy'" in message
    assert "core-fancy-a:'fancy'" in message or "core-fancy-a:" in message


def test_pin_selects_one_of_two_conflicting_distributions(installed: Installer) -> None:
    _strategy_dist(installed, "core-fancy-a", "fancy_a")
    _strategy_dist(installed, "core-fancy-b", "fancy_b")
    active = core.resolve(strategy="core-fancy-b:fancy")
    assert active.config.distributions["strategy"] == "core-fancy-b"
    assert type(active.strategy).__module__ == "fancy_b"


def test_overriding_a_builtin_needs_the_builtin_blocked(installed: Installer, monkeypatch: pytest.MonkeyPatch) -> None:
    _strategy_dist(installed, "core-better-single", "better_single", alias="single_device")
    with pytest.raises(core.PluginConflictError, match="core-better-single"):
        core.resolve(strategy="single_device")
    monkeypatch.setenv("CORE_DISABLE_PLUGINS", "core:single_device")
    active = core.resolve(strategy="single_device")
    assert active.config.distributions["strategy"] == "core-better-single"


def test_incompatible_core_requirement_is_refused_with_both_versions(installed: Installer) -> None:
    _strategy_dist(installed, "core-future", "future_plugin", version="3.0.0", requires=("core>=2.0",))
    info = next(info for info in discover().entries if info.distribution == "core-future")
    assert info.status == "incompatible"
    assert info.requires_core == ">=2.0"
    with pytest.raises(core.IncompatiblePluginError) as excinfo:
        core.resolve(strategy="fancy")
    message = str(excinfo.value)
    assert "core-future 3.0.0 requires core>=2.0" in message
    assert f"core {core.__version__} is installed" in message
    assert "future_plugin" not in __import__("sys").modules


def test_requirement_behind_an_extra_marker_is_ignored(installed: Installer) -> None:
    _strategy_dist(installed, "core-extra", "extra_plugin", requires=('core>=9; extra == "docs"',))
    info = next(info for info in discover().entries if info.distribution == "core-extra")
    assert info.status == "ok"


def test_broken_import_is_reported_against_the_plugin_and_nothing_else(installed: Installer) -> None:
    installed(
        "core-broken",
        {"strategy": {"broken": "broken_plugin:factory"}},
        {"broken_plugin": "import not_a_module_anywhere\n"},
    )
    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(strategy="broken")
    message = str(excinfo.value)
    assert "'broken' from core-broken 1.0.0 failed to import" in message
    assert "not_a_module_anywhere" in message
    assert "CORE_DISABLE_PLUGINS=core-broken" in message
    # Everything else keeps working.
    assert core.resolve().config.strategy == "single_device"


def test_broken_auto_candidate_is_skipped_with_a_warning_or_fatal_when_strict(
    installed: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed(
        "core-badenv",
        {"environment": {"badenv": "badenv_plugin:factory"}},
        {"badenv_plugin": "raise RuntimeError('boom at import')\n"},
    )
    with pytest.warns(core.CoreWarning, match="boom at import"):
        active = core.resolve()
    assert active.config.environment == "local"
    monkeypatch.setenv("CORE_STRICT_PLUGINS", "1")
    with pytest.raises(core.BrokenPluginError, match="boom at import"):
        core.resolve()


def test_strict_mode_makes_a_conflict_fatal_even_when_unused(
    installed: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _strategy_dist(installed, "core-fancy-a", "fancy_a")
    _strategy_dist(installed, "core-fancy-b", "fancy_b")
    assert core.resolve().config.strategy == "single_device"  # not strict: unused conflicts are harmless
    monkeypatch.setenv("CORE_STRICT_PLUGINS", "1")
    with pytest.raises(core.PluginConflictError, match="core-fancy-a, core-fancy-b"):
        core.resolve()


@pytest.mark.parametrize("blocked", ["fancy", "core-fancy", "core_fancy", "strategy:fancy", "core-fancy:fancy"])
def test_disable_by_alias_or_distribution(installed: Installer, monkeypatch: pytest.MonkeyPatch, blocked: str) -> None:
    _strategy_dist(installed, "core-fancy", "fancy_plugin")
    monkeypatch.setenv("CORE_DISABLE_PLUGINS", f"something-else, {blocked}")
    info = next(info for info in discover().entries if info.distribution == "core-fancy")
    assert info.status == "disabled"
    with pytest.raises(core.PluginDisabledError) as excinfo:
        core.resolve(strategy="fancy")
    assert "CORE_DISABLE_PLUGINS" in str(excinfo.value) and "core-fancy" in str(excinfo.value)


def test_disabling_a_builtin_blocks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_DISABLE_PLUGINS", "64-true")
    with pytest.raises(core.PluginDisabledError, match="64-true"):
        core.resolve(precision="64-true")
    assert core.resolve(precision="64").config.precision == "64-true"  # the legacy alias is a separate entry


def test_autoload_off_keeps_third_party_out_of_auto_detection(
    installed: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed(
        "core-alwaysenv",
        {"environment": {"alwaysenv": "alwaysenv_plugin:factory"}},
        {
            "alwaysenv_plugin": '''
                from core import hookimpl, ClusterInfo

                class Env:
                    kind = "environment"
                    name = "alwaysenv"
                    priority = 50

                    @hookimpl
                    def environment_detect(self):
                        return self

                    @hookimpl
                    def environment_creates_processes_externally(self):
                        return False

                    @hookimpl
                    def environment_cluster_info(self, devices_per_node, num_nodes):
                        return ClusterInfo(world_size=1, global_rank=0, local_rank=0, node_rank=0)

                def factory():
                    return Env()
            '''
        },
    )
    assert core.resolve().config.environment == "alwaysenv"
    monkeypatch.setenv("CORE_PLUGINS_AUTOLOAD", "0")
    assert core.resolve().config.environment == "local"
    assert next(i for i in discover().entries if i.alias == "alwaysenv").status == "explicit-only"
    # Naming it in code still works.
    assert core.resolve(plugins=["alwaysenv"]).config.environment == "alwaysenv"
