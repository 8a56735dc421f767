"""The tpu accelerator and the xla / single_xla strategies on a machine without torch_xla.

What is not covered here: torch_xla is not installed, so no XLA device, no ``xmp.spawn`` launch, no
XLA collective (reduce, all_gather, broadcast, barrier), no ``mark_step`` and no checkpoint of XLA
tensors is ever executed. The tests check what can be checked without it: the plugins list and load,
say precisely why they cannot run, refuse every combination they declare against, and parse devices.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from core_tpu import TPUAccelerator, XLAProbe, XLAStrategy, parse_xla_devices, probe, xla_unavailable_reason

import core
from core import Catalog, discover, parse_devices


def catalog() -> Catalog:
    return Catalog(tuple(info for info in discover().entries if info.distribution in {"core", "core-tpu", "core-amp"}))


def test_probe_reports_the_real_import_error() -> None:
    facts = probe()
    assert facts.import_error == "ModuleNotFoundError: No module named 'torch_xla'"
    reason = TPUAccelerator().unavailable_reason()
    assert reason is not None
    assert reason.startswith("torch_xla is not importable: pip install torch_xla (the release matching torch ")
    assert reason.endswith("importing it failed with ModuleNotFoundError: No module named 'torch_xla'")


def test_unavailable_reasons_from_each_kind_of_fact() -> None:
    assert "not importable" in str(xla_unavailable_reason(XLAProbe(import_error="ImportError: libtpu"), "2.5.0"))
    runtime_failure = XLAProbe(import_error=None, runtime_error="RuntimeError: no PJRT_DEVICE")
    assert "PJRT runtime failed to start: RuntimeError" in str(xla_unavailable_reason(runtime_failure, "2.5.0"))
    on_cpu = XLAProbe(import_error=None, device_type="CPU", device_count=0)
    assert "targets 'CPU', not a TPU" in str(xla_unavailable_reason(on_cpu, "2.5.0"))
    no_chip = XLAProbe(import_error=None, device_type="TPU", device_count=0)
    assert "finds no TPU device" in str(xla_unavailable_reason(no_chip, "2.5.0"))
    assert xla_unavailable_reason(XLAProbe(import_error=None, device_type="TPU", device_count=4), "2.5.0") is None


@pytest.mark.parametrize(
    ("devices", "expected"), [("auto", [0, 1, 2, 3]), (-1, [0, 1, 2, 3]), (4, [0, 1, 2, 3]), (1, [0]), ([2], [2])]
)
def test_parse_devices_one_or_all_or_one_index(devices: object, expected: list[int]) -> None:
    assert parse_xla_devices(parse_devices(devices), 4) == expected


@pytest.mark.parametrize("devices", [2, [0, 1], [4]])
def test_other_device_requests_are_refused_with_the_choices(devices: object) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        parse_xla_devices(parse_devices(devices), 4)
    assert "torch_xla runs either one process or one per device, and this host has 4" in str(excinfo.value)
    assert "Pass devices=1, devices=4 (or -1), or one index such as [0]" in str(excinfo.value)


def test_listed_and_check_gives_the_real_reason() -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "core.plugins", "--check", "--json"], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr
    rows = {
        (row["kind"], row["alias"], row["distribution"]): row
        for row in json.loads(checked.stdout)["plugins"] if row["distribution"] == "core-tpu"
    }
    assert set(rows) == {("accelerator", "tpu", "core-tpu"), ("strategy", "xla", "core-tpu"),
                         ("strategy", "single_xla", "core-tpu"), ("strategy", "tpu_spawn", "core-tpu")}
    tpu = rows[("accelerator", "tpu", "core-tpu")]
    assert tpu["check"] == "unavailable"
    assert "torch_xla is not importable: pip install torch_xla" in tpu["check_reason"]
    assert "No module named 'torch_xla'" in tpu["check_reason"]


def test_selecting_it_here_is_a_clear_unavailable_error() -> None:
    with pytest.raises(core.PluginUnavailableError) as excinfo:
        core.resolve(accelerator="tpu", strategy="xla", catalog=catalog())
    message = str(excinfo.value)
    assert "The accelerator 'tpu' (core-tpu) is installed but cannot run here: torch_xla is not importable" in message


@pytest.mark.parametrize("strategy", ["xla", "single_xla"])
def test_xla_strategies_refuse_other_accelerators_naming_both_and_the_way_out(strategy: str) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(accelerator="cpu", strategy=strategy, catalog=catalog())
    message = str(excinfo.value)
    assert f"The strategy '{strategy}' (core-tpu) does not support the accelerator 'cpu' (core)" in message
    assert "only accelerator ['tpu']" in message and "pass accelerator='tpu'" in message


@pytest.fixture
def four_tpu_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace only the hardware query: torch_xla importable, a TPU runtime with 4 devices."""
    tpu_host = XLAProbe(import_error=None, device_type="TPU", device_count=4)
    # The hardware query is the one seam a test without a TPU must replace: where the plugin looks it up.
    monkeypatch.setattr("core_tpu._runtime.probe", lambda: tpu_host)


def test_with_a_tpu_auto_picks_it_first_and_xla_strategies_resolve(four_tpu_devices: None) -> None:
    """The resolver's real path with a faked TPU. Not covered: launching, devices and collectives (torch_xla)."""
    config = core.resolve(strategy="xla", catalog=catalog()).config
    assert (config.accelerator, config.strategy, config.device_ids) == ("tpu", "xla", (0, 1, 2, 3))
    config = core.resolve(strategy="single_xla", devices=1, precision="bf16-mixed", catalog=catalog()).config
    assert (config.accelerator, config.strategy, config.precision) == ("tpu", "single_xla", "bf16-mixed")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"strategy": "single_device", "devices": 1},
         "The accelerator 'tpu' (core-tpu) does not support the strategy 'single_device' (core)"),
        ({"strategy": "xla", "precision": "64-true"},
         "The accelerator 'tpu' (core-tpu) does not support the precision '64-true' (core)"),
        ({"strategy": "xla", "precision": "16-mixed"},
         "The precision '16-mixed' (core-amp) does not support the accelerator 'tpu' (core-tpu)"),
    ],
)
def test_with_a_tpu_declared_refusals_name_both_plugins_and_the_hint(
    four_tpu_devices: None, options: dict[str, object], expected: str
) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(accelerator="tpu", catalog=catalog(), **options)  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert expected in message
    assert "use precision='bf16-mixed'" in message or "On TPU use strategy='xla'" in message


def test_with_a_tpu_the_xla_strategy_refuses_a_single_process(four_tpu_devices: None) -> None:
    with pytest.raises(core.ConfigurationError, match=r"strategy='xla' starts one process per TPU device.*single_xla"):
        core.resolve(accelerator="tpu", strategy="xla", devices=1, catalog=catalog())


def test_declared_priority_backend_and_process_limits() -> None:
    assert TPUAccelerator().priority == 30
    assert core.registry._resolver.ask(TPUAccelerator(), "accelerator", "accelerator_process_group_backend") == "xla"
    assert XLAStrategy.max_processes is None
