"""On a real CUDA device: ``auto`` picks cuda and ``--check`` says so, device parsing against the real device count,
and a clear error for an index that does not exist.

Marked ``gpu``: skipped with its reason where torch sees no CUDA device (every CI machine), run by
``make gpu-check`` on the GPU machine (scripts/gpu_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from core_cuda import parse_cuda_devices

import core
from core import Lite, parse_devices

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]


def device_count() -> int:
    return torch.cuda.device_count()


def test_auto_resolves_cuda_with_every_visible_device() -> None:
    config = core.resolve(accelerator="auto", strategy="auto", devices="auto").config
    assert config.accelerator == "cuda"
    assert config.distributions["accelerator"] == "core-cuda"
    assert list(config.device_ids) == list(range(device_count()))


def test_plugins_check_says_cuda_is_usable_and_auto_picks_it() -> None:
    command = [sys.executable, "-m", "core.plugins", "--check", "--kind", "accelerator"]
    text = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "accelerator='auto' would pick: cuda (core-cuda)" in text, text
    listed = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, check=True).stdout
    rows = {row["alias"]: row for row in json.loads(listed)["plugins"]}
    assert rows["cuda"]["check"] == "usable", rows["cuda"]
    assert rows["gpu"]["check"] == "usable", rows["gpu"]
    assert rows["cpu"]["check"] == "usable"


@pytest.mark.parametrize(("devices", "expected"), [([0], [0]), (-1, "all"), ("-1", "all"), ("0,", [0]), (1, [0])])
def test_device_requests_resolve_against_the_real_device_count(devices: object, expected: object) -> None:
    wanted = list(range(device_count())) if expected == "all" else expected
    config = core.resolve(accelerator="cuda", devices=devices).config
    assert list(config.device_ids) == wanted
    # The pure parser, given the count the driver reports, agrees with what the resolver did on the hardware.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    assert parse_cuda_devices(parse_devices(devices), device_count(), visible) == wanted


def test_devices_zero_as_a_string_is_refused_as_zero_devices_not_taken_as_index_0() -> None:
    with pytest.raises(core.ConfigurationError, match="zero devices would run nothing"):
        core.resolve(accelerator="cuda", devices="0")


def test_a_device_index_that_does_not_exist_is_a_clear_error() -> None:
    missing = device_count()
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(accelerator="cuda", devices=[missing])
    message = str(excinfo.value)
    assert f"names CUDA indices [{missing}] that do not exist" in message
    assert f"{device_count()} CUDA device(s) are visible" in message
    assert f"valid indices are 0..{device_count() - 1}" in message
    with pytest.raises(core.ConfigurationError, match=f"asks for {missing + 1} CUDA devices"):
        core.resolve(accelerator="gpu", devices=missing + 1)


def test_lite_puts_the_run_on_the_selected_cuda_device() -> None:
    def body(lite: Lite) -> tuple[str, str, int]:
        tensor = lite.to_device(torch.ones(2))
        return str(lite.device), str(tensor.device), torch.cuda.current_device()

    device, tensor_device, current = Lite(accelerator="cuda", devices=[0]).launch(body)
    assert (device, tensor_device, current) == ("cuda:0", "cuda:0", 0)
