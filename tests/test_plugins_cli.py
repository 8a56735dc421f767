"""``python -m core.plugins``: listing from metadata only, --json, --kind, show and --check."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import Installer, plugin_source

import core


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.plugins", *args], capture_output=True, text=True, env=env, timeout=60
    )


PROBE = """
import runpy, sys
sys.argv = ["core.plugins", *sys.argv[1:]]
try:
    runpy.run_module("core.plugins", run_name="__main__")
except SystemExit:
    pass
heavy = sorted(name for name in sys.modules if name == "torch" or name.startswith(("torch.", "sample_plugin")))
print("IMPORTED:" + ",".join(heavy), file=sys.stderr)
"""


def _imported_modules(env: dict[str, str] | None, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("IMPORTED:"))
    return line.removeprefix("IMPORTED:")


def _sample(installed: Installer) -> None:
    installed(
        "core-sample",
        {"strategy": {"sample": "sample_plugin:factory"}},
        {"sample_plugin": "import torch\n" + plugin_source("strategy", "sample")},
        version="2.5.0",
    )


def test_listing_imports_neither_torch_nor_plugins(installed: Installer) -> None:
    _sample(installed)
    assert _imported_modules(installed.env) == ""
    assert _imported_modules(installed.env, "--json") == ""
    assert _imported_modules(installed.env, "--kind", "strategy") == ""


def test_check_does_import_them(installed: Installer) -> None:
    _sample(installed)
    imported = _imported_modules(installed.env, "--check").split(",")
    assert "torch" in imported and "sample_plugin" in imported


def test_import_core_is_light() -> None:
    code = "import sys, core; print(sorted(m for m in ('torch', 'core.lite', 'core.builtin') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]"


def test_json_lists_builtins_and_third_party_with_distribution(installed: Installer) -> None:
    _sample(installed)
    result = run_cli("--json", env=installed.env)
    assert result.returncode == 0, result.stderr
    rows = {(row["kind"], row["alias"]): row for row in json.loads(result.stdout)}
    assert rows[("accelerator", "cpu")]["distribution"] == "core"
    assert rows[("accelerator", "cpu")]["version"] == core.__version__
    assert rows[("strategy", "single_device")]["target"] == "core.builtin.strategies:SingleDeviceStrategy"
    assert rows[("strategy", "sample")] | {} == {
        "kind": "strategy",
        "alias": "sample",
        "distribution": "core-sample",
        "version": "2.5.0",
        "target": "sample_plugin:factory",
        "requires_core": "<0.2,>=0.1",
        "status": "ok",
        "reason": "",
    }


def test_table_and_kind_filter() -> None:
    result = run_cli("--kind", "precision")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["kind", "alias", "distribution", "version", "status"]
    body = [line.split() for line in lines[2:]]
    assert {row[0] for row in body} == {"precision"}
    assert {"32-true", "64-true", "16-true", "bf16-true", "32", "64"} <= {row[1] for row in body}


def test_status_column_shows_conflicts_and_incompatibility(installed: Installer) -> None:
    _sample(installed)
    installed(
        "core-sample-twin",
        {"strategy": {"sample": "sample_twin:factory"}},
        {"sample_twin": plugin_source("strategy", "sample")},
    )
    installed(
        "core-old",
        {"strategy": {"old": "old_plugin:factory"}},
        {"old_plugin": plugin_source("strategy", "old")},
        requires=("core<0.1",),
    )
    output = run_cli("--kind", "strategy", env=installed.env).stdout
    assert "conflict: alias also provided by core-sample-twin" in output
    assert "incompatible: core-old 1.0.0 requires core<0.1, but core 0.1.0 is installed" in output


def test_show_describes_one_plugin() -> None:
    result = run_cli("show", "single_device")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "strategy 'single_device'" in out
    assert "target:        core.builtin.strategies:SingleDeviceStrategy" in out
    assert "strategy_launch" in out and "strategy_reduce" in out
    assert "Runs the function in this process" in out  # the docstring
    assert "supports:      any combination" in out
    missing = run_cli("show", "nope")
    assert missing.returncode == 2 and "No installed plugin has the alias 'nope'" in missing.stderr


def test_check_reports_usable_broken_and_the_auto_choices(installed: Installer) -> None:
    installed(
        "core-broken",
        {"checkpoint_io": {"brokenio": "broken_io:factory"}},
        {"broken_io": "raise ImportError('needs libfoo')\n"},
    )
    result = run_cli("--check", env=installed.env)
    assert result.returncode == 1  # a broken plugin makes --check fail
    table, _, rest = result.stdout.partition("\n\n")
    rows = {line.split()[1]: line.split()[4] for line in table.splitlines()[2:]}
    assert (rows["cpu"], rows["local"], rows["brokenio"]) == ("usable", "usable", "broken")
    assert "checkpoint_io 'brokenio' (core-broken): broken: The checkpoint_io plugin 'brokenio' from core-bro" in rest
    assert "accelerator='auto' would pick: cpu (core)" in result.stdout
    assert "environment detected here:     local (core)" in result.stdout
    # Long reasons are shortened to one line each; --verbose and --json give them whole.
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    assert "(reasons shortened; python -m core.plugins --check --verbose or --json prints them whole)" in rest


def test_check_verbose_and_json_give_long_reasons_whole(installed: Installer) -> None:
    reason = "needs libfoo " + "and a very long explanation of why " * 6 + "END"
    installed(
        "core-broken",
        {"checkpoint_io": {"brokenio": "broken_io:factory"}},
        {"broken_io": f"raise ImportError({reason!r})\n"},
    )
    verbose = run_cli("--check", "--verbose", "--kind", "checkpoint_io", env=installed.env)
    assert verbose.returncode == 1
    lines = verbose.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    start = lines.index("checkpoint_io 'brokenio' (core-broken): broken:")
    paragraph = " ".join(line.strip() for line in lines[start + 1:start + 6] if line.startswith("    "))
    assert f"ImportError: {reason}. Reinstall it (pip install --force-reinstall core-broken)" in paragraph
    payload = json.loads(run_cli("--check", "--json", "--kind", "checkpoint_io", env=installed.env).stdout)
    check_reason = next(row["check_reason"] for row in payload["plugins"] if row["alias"] == "brokenio")
    assert f"ImportError: {reason}. Reinstall it" in check_reason


def test_check_of_the_legacy_precision_aliases_says_no_deprecation() -> None:
    result = run_cli("--check", "--kind", "precision")
    rows = {line.split()[1]: line.split()[4] for line in result.stdout.partition("\n\n")[0].splitlines()[2:]}
    assert rows["16"] == rows["bf16"] == "usable"  # imported and checked
    assert "CoreDeprecationWarning" not in result.stderr  # the warning is for whoever selects the alias


def test_check_json_payload() -> None:
    result = run_cli("--check", "--json", "--kind", "accelerator")
    payload = json.loads(result.stdout)
    assert payload["auto"]["accelerator"] == "cpu (core)"
    assert [row["check"] for row in payload["plugins"] if row["alias"] == "cpu"] == ["usable"]
