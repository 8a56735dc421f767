"""The cuda accelerator: device parsing and the unavailable reason as pure functions, and its behaviour
on this machine, which has no GPU and a CPU-only torch.

What is not covered here: nothing below runs on a GPU. ``torch.cuda.set_device``, nccl process groups,
``torch.cuda.memory_stats`` (device stats) and ``empty_cache`` are never executed; they need CUDA hardware.
"""

from __future__ import annotations

import json
import subprocess
import sys

import core_cuda
import pytest
import torch
from core_cuda import cuda_unavailable_reason, describe_visible, parse_cuda_devices, visible_entries

import core
from core import Catalog, DeviceRequest, discover, parse_devices


def catalog() -> Catalog:
    return Catalog(tuple(info for info in discover().entries if info.distribution in {"core", "core-cuda"}))


# ---------------------------------------------------------------------------------------------------
# Device parsing, with the visible device count passed in
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "visible", "expected"),
    [
        ("auto", 4, [0, 1, 2, 3]),
        (-1, 3, [0, 1, 2]),
        ("-1", 2, [0, 1]),
        (1, 4, [0]),
        ("2", 4, [0, 1]),
        ([1, 3], 4, [1, 3]),
        ("3, 0", 4, [0, 3]),
        (4, 4, [0, 1, 2, 3]),
    ],
)
def test_parse_devices_against_the_visible_count(devices: object, visible: int, expected: list[int]) -> None:
    assert parse_cuda_devices(parse_devices(devices), visible, None) == expected


def test_a_count_above_what_is_visible_names_both_and_cuda_visible_devices() -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        parse_cuda_devices(parse_devices(3), 2, "4,5")
    message = str(excinfo.value)
    assert "devices=3 asks for 3 CUDA devices" in message
    assert "2 CUDA device(s) are visible (CUDA_VISIBLE_DEVICES='4,5', so index 0 is GPU 4)" in message
    assert "Pass devices=2 or fewer" in message


def test_an_index_outside_the_visible_devices_is_refused_with_the_valid_range() -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        parse_cuda_devices(parse_devices([0, 2, 5]), 2, None)
    message = str(excinfo.value)
    assert "names CUDA indices [2, 5] that do not exist" in message
    assert "CUDA_VISIBLE_DEVICES is not set" in message and "valid indices are 0..1" in message


def test_no_visible_device_cannot_be_parsed() -> None:
    with pytest.raises(core.ConfigurationError, match=r"0 CUDA device\(s\) are visible \(CUDA_VISIBLE_DEVICES=''\)"):
        parse_cuda_devices(DeviceRequest(auto=True), 0, "")


@pytest.mark.parametrize(
    ("value", "entries"),
    [(None, None), ("", []), ("0,1", ["0", "1"]), (" 2 , 3 ", ["2", "3"]), ("1,-1,2", ["1"]), ("-1", []),
     ("GPU-8f2a,GPU-77c1", ["GPU-8f2a", "GPU-77c1"])],
)
def test_cuda_visible_devices_entries_stop_where_the_runtime_stops(
    value: str | None, entries: list[str] | None
) -> None:
    assert visible_entries(value) == entries


def test_describe_visible() -> None:
    assert describe_visible(2, None) == "2 CUDA device(s) are visible (CUDA_VISIBLE_DEVICES is not set)"
    assert describe_visible(1, "3") == "1 CUDA device(s) are visible (CUDA_VISIBLE_DEVICES='3', so index 0 is GPU 3)"


# ---------------------------------------------------------------------------------------------------
# Why it is unavailable
# ---------------------------------------------------------------------------------------------------


def test_unavailable_reasons() -> None:
    common = {"torch_version": "2.13.0+cpu"}
    assert cuda_unavailable_reason(built=False, device_count=0, visible_devices=None, **common) == (
        "this torch build (2.13.0+cpu) has no CUDA support; install a CUDA build of torch "
        "(https://pytorch.org/get-started/locally/)"
    )
    assert cuda_unavailable_reason(built=True, device_count=0, visible_devices="", **common) == (
        "CUDA_VISIBLE_DEVICES='' hides every GPU; unset it or list the GPUs to use"
    )
    assert "no CUDA device" in str(cuda_unavailable_reason(built=True, device_count=0, visible_devices=None, **common))
    assert "nvidia-smi" in str(cuda_unavailable_reason(built=True, device_count=0, visible_devices="0", **common))
    assert cuda_unavailable_reason(built=True, device_count=1, visible_devices=None, **common) is None


def test_the_reason_on_this_machine_is_the_real_one() -> None:
    assert not torch.backends.cuda.is_built(), "this test describes the CPU-only torch of this machine"
    reason = core_cuda.CUDAAccelerator().unavailable_reason()
    assert reason is not None and f"this torch build ({torch.__version__}) has no CUDA support" in reason


# ---------------------------------------------------------------------------------------------------
# On this machine: listed, unavailable with the reason, refused cleanly
# ---------------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "core.plugins", *args], capture_output=True, text=True, timeout=120)


def test_listed_under_both_aliases_and_check_gives_the_reason() -> None:
    listing = run_cli("--kind", "accelerator").stdout
    assert any(line.split()[:3] == ["accelerator", "cuda", "core-cuda"] for line in listing.splitlines())
    assert any(line.split()[:3] == ["accelerator", "gpu", "core-cuda"] for line in listing.splitlines())
    checked = run_cli("--check", "--kind", "accelerator")
    assert checked.returncode == 0, checked.stderr
    assert "accelerator='auto' would pick: cpu (core)" in checked.stdout
    checked = run_cli("--check", "--kind", "accelerator", "--json")
    rows = [row for row in json.loads(checked.stdout)["plugins"] if row["distribution"] == "core-cuda"]
    assert sorted(row["alias"] for row in rows) == ["cuda", "gpu"]
    assert all(row["check"] == "unavailable" for row in rows)
    for row in rows:
        assert "this torch build" in row["check_reason"] and "has no CUDA support" in row["check_reason"]


@pytest.mark.parametrize("alias", ["cuda", "gpu"])
def test_selecting_it_here_is_a_clear_unavailable_error(alias: str) -> None:
    with pytest.raises(core.PluginUnavailableError) as excinfo:
        core.resolve(accelerator=alias, catalog=catalog())
    message = str(excinfo.value)
    assert "The accelerator 'cuda' (core-cuda) is installed but cannot run here" in message
    assert "has no CUDA support" in message and "Use accelerator='cpu'" in message


def test_auto_does_not_pick_it_here() -> None:
    assert core.resolve(catalog=catalog()).config.accelerator == "cpu"


def test_nccl_is_the_default_backend_and_priority_ranks_it_after_tpu() -> None:
    accelerator = core_cuda.CUDAAccelerator()
    assert core.registry._resolver.ask(accelerator, "accelerator", "accelerator_process_group_backend") == "nccl"
    assert accelerator.priority == 20


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace only the hardware queries: a CUDA build of torch that sees 4 devices."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


def test_with_gpus_both_aliases_resolve_to_the_canonical_name(four_gpus: None) -> None:
    """The resolver's real path with a faked device count. Not covered: any CUDA call beyond the count."""
    for alias in ("cuda", "gpu"):
        config = core.resolve(accelerator=alias, devices=[3], catalog=catalog()).config
        assert config.accelerator == "cuda" and config.device_ids == (3,)
        assert config.distributions["accelerator"] == "core-cuda"
    assert core.resolve(devices=1, catalog=catalog()).config.accelerator == "cuda", "auto prefers cuda over cpu"


def test_with_gpus_the_request_is_checked_against_cuda_visible_devices(
    four_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA_VISIBLE_DEVICES is read for real; the count it leads to is faked (torch would report 2)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    with pytest.raises(core.ConfigurationError, match=r"CUDA_VISIBLE_DEVICES='6,7', so index 0 is GPU 6"):
        core.resolve(accelerator="cuda", devices=[2], catalog=catalog())
