"""The mps accelerator: its rules as pure functions, and its behaviour on this Linux machine without MPS.

What is not covered here: nothing below runs on an Apple GPU. Moving tensors to ``mps``, its memory
statistics and ``torch.mps.empty_cache`` need macOS on Apple silicon.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest
import torch
from core_mps import MPSAccelerator, mps_unavailable_reason, parse_mps_devices

import core
from core import Catalog, discover, parse_devices


def catalog() -> Catalog:
    return Catalog(tuple(info for info in discover().entries if info.distribution in {"core", "core-mps"}))


@pytest.mark.parametrize("devices", ["auto", 1, "1", -1, [0]])
def test_the_single_device_is_selected(devices: object) -> None:
    assert parse_mps_devices(parse_devices(devices)) == [0]


@pytest.mark.parametrize("devices", [2, [1], [0, 1]])
def test_more_than_the_one_device_is_refused(devices: object) -> None:
    with pytest.raises(core.ConfigurationError, match=r"MPS has exactly one device.*accelerator='cpu' with devices=N"):
        parse_mps_devices(parse_devices(devices))


def test_unavailable_reasons() -> None:
    facts = {"machine": "arm64", "torch_version": "2.13.0"}
    assert "only on macOS" in str(mps_unavailable_reason(system="Linux", built=False, available=False, **facts))
    assert "compiled without MPS" in str(mps_unavailable_reason(system="Darwin", built=False, available=False, **facts))
    assert "macOS 12.3 or later" in str(mps_unavailable_reason(system="Darwin", built=True, available=False, **facts))
    assert mps_unavailable_reason(system="Darwin", built=True, available=True, **facts) is None


def test_listed_and_check_gives_the_real_reason() -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "core.plugins", "--check", "--kind", "accelerator", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    row = next(row for row in json.loads(checked.stdout)["plugins"] if row["distribution"] == "core-mps")
    expected = f"MPS exists only on macOS with Apple silicon, and this machine runs {platform.system()}"
    assert (row["alias"], row["check"]) == ("mps", "unavailable") and expected in row["check_reason"]


def test_selecting_it_here_is_a_clear_unavailable_error() -> None:
    with pytest.raises(core.PluginUnavailableError) as excinfo:
        core.resolve(accelerator="mps", catalog=catalog())
    message = str(excinfo.value)
    assert "The accelerator 'mps' (core-mps) is installed but cannot run here" in message
    assert "only on macOS" in message and "Use accelerator='cpu'" in message


@pytest.fixture
def apple_silicon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace only the platform and availability queries, as on a Mac with MPS."""
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)


def test_on_a_mac_auto_picks_mps_and_64_true_is_refused(apple_silicon: None) -> None:
    """The resolver's real path with faked availability. Not covered: any computation on the MPS device."""
    assert core.resolve(catalog=catalog()).config.accelerator == "mps"
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(accelerator="mps", precision="64-true", catalog=catalog())
    message = str(excinfo.value)
    assert "The accelerator 'mps' (core-mps) does not support the precision '64-true' (core)" in message
    assert "never precision ['64-true']" in message and "has no float64" in message


def test_on_a_mac_only_single_device_strategies_are_accepted(apple_silicon: None) -> None:
    from core.toolkit.strategies import SingleDeviceStrategy

    class DDPLike(SingleDeviceStrategy):
        name = "ddp_spawn"
        max_processes = None

    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(accelerator="mps", strategy=DDPLike(), catalog=catalog())
    message = str(excinfo.value)
    assert "The accelerator 'mps' (core-mps) does not support the strategy 'ddp_spawn'" in message
    assert "only strategy ['single_device']" in message and "accelerator='cpu' for DDP-family strategies" in message


def test_declared_priority_and_backend() -> None:
    accelerator = MPSAccelerator()
    assert accelerator.priority == 10
    assert core.registry._resolver.ask(accelerator, "accelerator", "accelerator_process_group_backend") == "gloo"
