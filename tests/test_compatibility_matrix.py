"""Declared compatibility: the matrix, the resolver's verdict on every installed triple, and docs/compatibility.md.

Some tests fake the hardware queries of core-cuda, core-mps and core-tpu (device count, platform,
torch_xla probe) so that the resolver gets past "unavailable" and reaches the compatibility check.
Not covered by those: anything that runs on the devices themselves.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import platform
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch
from conftest import Installer, plugin_source

import core
from core.plugins._matrix import Matrix, build_matrix, render_text
from core.registry._discovery import Catalog, discover

REPO = Path(__file__).resolve().parent.parent
FIRST_PARTY_HARDWARE = ("core-cuda", "core-mps", "core-tpu", "core-amp")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_compatibility", REPO / "scripts" / "gen_compatibility.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _require(*distributions: str) -> None:
    installed = {info.distribution for info in discover().entries}
    missing = [name for name in distributions if name not in installed]
    if missing:
        pytest.skip(f"first-party distributions not installed: {missing} (pip install --no-deps -e plugins/<name>)")


@pytest.fixture
def all_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace only the hardware queries: 2 CUDA devices, a Mac with MPS, a TPU host with 2 devices."""
    _require("core-cuda", "core-mps", "core-tpu")
    import core_tpu._runtime

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    tpu_host = core_tpu._runtime.XLAProbe(import_error=None, device_type="TPU", device_count=2)
    monkeypatch.setattr(core_tpu._runtime, "probe", lambda: tpu_host)


# ---------------------------------------------------------------------------------------------------
# docs/compatibility.md is current
# ---------------------------------------------------------------------------------------------------


def test_docs_compatibility_md_is_current(tmp_path: Path) -> None:
    script = _script()
    names = script.first_party_distributions()
    missing = script.missing_distributions(names)
    if missing:
        pytest.skip(
            f"cannot regenerate docs/compatibility.md: first-party distributions not installed: {missing} "
            f"(the page covers every plugins/*/pyproject.toml; run make setup)"
        )
    output = tmp_path / "compatibility.md"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_compatibility.py"), "--output", str(output)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    committed = (REPO / "docs" / "compatibility.md").read_text()
    assert output.read_text() == committed, (
        "docs/compatibility.md is out of date: run python scripts/gen_compatibility.py (make docs) and commit it"
    )


# ---------------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------------


def _first_party_matrix() -> Matrix:
    _require(*FIRST_PARTY_HARDWARE)
    wanted = {"core", *FIRST_PARTY_HARDWARE}
    return build_matrix(discover(), {info.distribution for info in discover().entries if info.distribution in wanted})


def test_matrix_cells_follow_the_declarations() -> None:
    matrix = _first_party_matrix()
    precision_by_accelerator = matrix.tables[0]
    assert (precision_by_accelerator.row_kind, precision_by_accelerator.column_kind) == ("precision", "accelerator")
    assert precision_by_accelerator.columns == ("cpu", "cuda", "mps", "tpu")
    assert precision_by_accelerator.cell("16-mixed", "cpu").ok
    assert precision_by_accelerator.cell("16-mixed", "tpu").refused_by == ("16-mixed",)
    assert precision_by_accelerator.cell("64-true", "mps").refused_by == ("mps",)
    assert precision_by_accelerator.cell("bf16-mixed", "tpu").ok
    strategy_by_accelerator = matrix.tables[1]
    assert strategy_by_accelerator.cell("xla", "mps").refused_by == ("xla", "mps")
    assert strategy_by_accelerator.cell("single_device", "tpu").refused_by == ("tpu",)
    assert strategy_by_accelerator.cell("single_xla", "tpu").ok
    assert matrix.member("accelerator", "cuda").aliases == ("cuda", "gpu")
    assert matrix.member("precision", "16-mixed").aliases == ("16", "16-mixed")


def test_every_refused_cell_names_both_plugins_and_the_hint() -> None:
    matrix = build_matrix(discover())
    refused = [cell for table in matrix.tables for cell in table.cells if not cell.ok]
    assert refused
    for table in matrix.tables:
        for cell in (cell for cell in table.cells if not cell.ok):
            row = matrix.member(table.row_kind, cell.row)
            column = matrix.member(table.column_kind, cell.column)
            holder = row if cell.refused_by[0] == row.name else column
            assert f"'{row.name}' ({row.distribution})" in cell.reason, cell.reason
            assert f"'{column.name}' ({column.distribution})" in cell.reason, cell.reason
            assert holder.supports.describe() in cell.reason and holder.supports.hint in cell.reason


def test_the_matrix_command_prints_text_and_json_without_hardware_or_warnings() -> None:
    _require(*FIRST_PARTY_HARDWARE)
    text = subprocess.run(
        [sys.executable, "-m", "core.plugins", "matrix"], capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0 and text.stderr == "", text.stderr
    lines = text.stdout.splitlines()
    assert "precision x accelerator" in lines and "strategy x accelerator" in lines and "precision x strategy" in lines
    row = next(line.split() for line in lines if line.strip().startswith("64-true"))
    assert row[:2] == ["64-true", "ok"] and "(mps)" in row and "(tpu)" in row
    assert any(line.strip().startswith("tpu (accelerator, core-tpu): only strategy ['single_xla', 'xla']")
               for line in lines)
    assert any("16-mixed = 16, 16-mixed" in line for line in lines)

    payload = json.loads(
        subprocess.run(
            [sys.executable, "-m", "core.plugins", "matrix", "--json"], capture_output=True, text=True, timeout=120
        ).stdout
    )
    cells = {
        (table["rows"], cell["row"], cell["column"]): cell for table in payload["tables"] for cell in table["cells"]
    }
    refused = cells[("precision", "16-mixed", "tpu")]
    assert refused["ok"] is False and refused["refused_by"] == ["16-mixed"]
    assert "The precision '16-mixed' (core-amp) does not support the accelerator 'tpu' (core-tpu)" in refused["reason"]
    assert cells[("precision", "bf16-mixed", "cpu")] == {
        "row": "bf16-mixed", "column": "cpu", "ok": True, "refused_by": [], "reason": ""
    }


def test_a_third_party_declaration_shows_up_without_any_core_change(installed: Installer) -> None:
    source = plugin_source("strategy", "gpu_only").replace(
        "return Strategy()", "return Strategy(supports=Supports(only={'accelerator': {'cuda'}}, hint='Buy a GPU.'))"
    )
    installed(
        "core-gpu-only",
        {"strategy": {"gpu_only": "gpu_only_plugin:factory"}},
        {"gpu_only_plugin": "from core import Supports\n" + source},
    )
    matrix = build_matrix(discover())
    cell = matrix.tables[1].cell("gpu_only", "cpu")
    assert cell.refused_by == ("gpu_only",)
    assert "The strategy 'gpu_only' (core-gpu-only) does not support the accelerator 'cpu' (core)" in cell.reason
    assert cell.reason.endswith("Buy a GPU.")
    assert "gpu_only (strategy, core-gpu-only): only accelerator ['cuda']. Buy a GPU." in render_text(matrix)


def test_a_broken_plugin_is_left_out_of_the_matrix_with_its_reason(installed: Installer) -> None:
    installed("core-broken", {"precision": {"8-bit": "missing_module:factory"}})
    matrix = build_matrix(discover())
    assert [(s.alias, s.distribution) for s in matrix.skipped] == [("8-bit", "core-broken")]
    assert "failed to import" in matrix.skipped[0].reason
    assert "not in the matrix: precision '8-bit' (core-broken), broken:" in render_text(matrix)


# ---------------------------------------------------------------------------------------------------
# The resolver on every installed triple
# ---------------------------------------------------------------------------------------------------


def _devices_for(strategy: str, accelerator: str, catalog: Catalog) -> int:
    plugin = core.registry._discovery.load(catalog.lookup("strategy", strategy))
    single = getattr(plugin, "max_processes", None) == 1
    return 1 if single or accelerator == "mps" else 2


def _verdicts(matrix: Matrix, triple: dict[str, str]) -> list[tuple[str, str]]:
    """The refused pairs of a triple, according to the matrix."""
    refused = []
    for table in matrix.tables:
        cell = table.cell(triple[table.row_kind], triple[table.column_kind])
        if not cell.ok:
            refused.append((cell.row, cell.column))
    return refused


def _resolve_every_triple(matrix: Matrix, catalog: Catalog) -> dict[str, int]:
    outcomes = {"accepted": 0, "refused": 0, "unavailable": 0}
    kinds = ("accelerator", "strategy", "precision")
    for names in itertools.product(*(tuple(m.name for m in matrix.of_kind(kind)) for kind in kinds)):
        triple = dict(zip(kinds, names, strict=True))
        refused = _verdicts(matrix, triple)
        devices = _devices_for(triple["strategy"], triple["accelerator"], catalog)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", core.CoreWarning)
                core.resolve(devices=devices, catalog=catalog, **triple)
        except core.PluginUnavailableError as error:
            assert f"The accelerator '{triple['accelerator']}'" in str(error) and "cannot run here" in str(error)
            outcomes["unavailable"] += 1
            continue
        except core.CoreError as error:
            assert refused, f"{triple} (devices={devices}) is refused though every pair is declared compatible: {error}"
            message = str(error)
            assert any(f"'{a}'" in message and f"'{b}'" in message for a, b in refused), (triple, refused, message)
            outcomes["refused"] += 1
            continue
        assert not refused, f"{triple} is accepted although the matrix refuses {refused}"
        outcomes["accepted"] += 1
    return outcomes


@pytest.mark.timeout(240)
def test_every_installed_triple_is_accepted_or_refused_naming_the_pair(all_hardware: None) -> None:
    catalog = discover()
    outcomes = _resolve_every_triple(build_matrix(catalog), catalog)
    assert outcomes["unavailable"] == 0 and outcomes["accepted"] > 0 and outcomes["refused"] > 0, outcomes


@pytest.mark.timeout(240)
def test_on_this_machine_every_triple_is_accepted_refused_or_unavailable() -> None:
    """No faking: the accelerators without hardware here must fail as unavailable, never crash."""
    catalog = discover()
    outcomes = _resolve_every_triple(build_matrix(catalog), catalog)
    assert outcomes["accepted"] > 0, outcomes


# ---------------------------------------------------------------------------------------------------
# accelerator="auto": tpu, then cuda, then mps, then cpu
# ---------------------------------------------------------------------------------------------------


def test_auto_asks_tpu_then_cuda_then_mps_then_cpu(all_hardware: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import core_tpu._runtime

    def auto() -> str:
        return core.resolve(devices=1, strategy="single_xla" if picks_tpu else "single_device").config.accelerator

    picks_tpu = True
    assert auto() == "tpu"
    picks_tpu = False
    monkeypatch.setattr(core_tpu._runtime, "probe", lambda: core_tpu._runtime.XLAProbe(import_error="ImportError: x"))
    assert auto() == "cuda"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert auto() == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert auto() == "cpu"
