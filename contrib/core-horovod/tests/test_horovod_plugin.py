"""core-horovod without a job: listing, --check, detection, the install cache, the loopback wrapper."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from core_horovod import HorovodEnvironment, HorovodStrategy, derived_port, install, read_ranks
from core_horovod.run import bind_address, hosts_of

import core

HOROVODRUN_VARIABLES = {
    "HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
    "HOROVOD_CROSS_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "41234",
}


def test_listing_shows_both_plugins_without_importing_torch_or_horovod() -> None:
    code = ("import sys; from core.plugins import main; main([]); "
            "print('imported:', sorted(m for m in ('torch', 'horovod', 'core_horovod') if m in sys.modules))")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in finished.stdout.splitlines() if "core-horovod" in line]
    assert [row[:2] for row in rows] == [["strategy", "horovod"], ["environment", "horovod"]]
    assert "imported: []" in finished.stdout


def test_check_says_why_horovod_is_unusable_when_it_is_missing_and_how_to_install_it() -> None:
    # Hide the installed Horovod the way a machine without it looks: the import fails.
    code = "import sys; sys.modules['horovod'] = None; from core.plugins import main; main(['--check', '--json'])"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    row = next(row for row in json.loads(finished.stdout)["plugins"] if (row["kind"], row["alias"]) == (
        "strategy", "horovod"))
    assert row["check"] == "unavailable"
    assert "Horovod with PyTorch support is not importable" in row["check_reason"]
    assert "install it: python -m core_horovod.install" in row["check_reason"]


def test_the_environment_claims_horovodrun_ranks_and_gives_the_launchers_process_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in HOROVODRUN_VARIABLES.items():
        monkeypatch.setenv(name, value)
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # explicit ones would win over the derived port
        monkeypatch.delenv(name, raising=False)
    ranks = read_ranks()
    assert (ranks.global_rank, ranks.world_size, ranks.local_rank, ranks.local_size, ranks.num_nodes) == (1, 4, 1, 2, 2)
    environment = HorovodEnvironment()
    assert environment.environment_detect() is environment
    assert environment.environment_processes_per_node() == 2
    info = environment.environment_cluster_info(devices_per_node=2, num_nodes=2)
    assert info.main_port == derived_port("127.0.0.1:41234") and 20000 <= info.main_port < 30000
    with pytest.raises(core.ConfigurationError, match="horovodrun started 2 processes on this node"):
        environment.environment_validate_settings(devices_per_node=3, num_nodes=2)
    with pytest.raises(core.ConfigurationError, match="Pass num_nodes=2"):
        environment.environment_validate_settings(devices_per_node=2, num_nodes=1)
    monkeypatch.setenv("HOROVOD_SIZE", "four")
    with pytest.raises(core.ConfigurationError, match="HOROVOD_SIZE='four' is not a whole number"):
        read_ranks()


def test_the_environment_ignores_processes_horovodrun_did_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HOROVODRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert HorovodEnvironment().environment_detect() is None
    assert core.resolve(accelerator="cpu").config.environment == "local"


def test_strategy_options_are_checked() -> None:
    refusal = r"^HorovodStrategy\(backward_passes_per_step=0\): expected a whole number >= 1\.$"
    with pytest.raises(core.ConfigurationError, match=refusal):
        HorovodStrategy(backward_passes_per_step=0)
    with pytest.raises(core.ConfigurationError, match="compression='zstd'\\) is not a compression"):
        HorovodStrategy(compression="zstd")
    with pytest.raises(core.ConfigurationError, match="does not support the checkpoint_io 'distributed'"):
        core.resolve(accelerator="cpu", strategy="horovod", plugins=["distributed"])


def test_the_wrapper_binds_to_loopback_only_when_every_host_is_this_machine() -> None:
    assert hosts_of(["-np", "2", "-H", "localhost:2", "python", "x.py"]) == ["localhost"]
    assert hosts_of(["--hosts=a:2,b:2"]) == ["a", "b"]
    assert bind_address(["-np", "2", "-H", "localhost:2"], None) == "127.0.0.1"
    assert bind_address(["-np", "2"], None) == "127.0.0.1"
    assert bind_address(["-np", "4", "-H", "localhost:2,node2:2"], None) is None
    assert bind_address(["-np", "4", "-H", "node1:2,node2:2"], "10.0.0.5") == "10.0.0.5"


def test_the_install_cache_is_found_per_python_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_HOROVOD_WHEEL_CACHE", str(tmp_path))
    assert install.cache_directory() == tmp_path
    assert install.cached_wheel(tmp_path) is None
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheel = tmp_path / f"horovod-{install.VERSION}-{tag}-{tag}-linux_x86_64.whl"
    wheel.write_bytes(b"")
    (tmp_path / f"horovod-{install.VERSION}-cp27-cp27-linux_x86_64.whl").write_bytes(b"")
    assert install.cached_wheel(tmp_path) == wheel


def _wrapped(tmp_path: Path, optimization: int, arguments: list[str]) -> list[str]:
    """The arguments the real compiler gets through the build's wrapper (a script that prints them stands in)."""
    echo = tmp_path / "echo-arguments"
    echo.write_text('#!/bin/sh\nfor argument in "$@"; do printf "%s\\n" "$argument"; done\n')
    wrapper = tmp_path / "cxx"
    wrapper.write_text(install.compiler_wrapper(str(echo), optimization))
    for script in (echo, wrapper):
        script.chmod(0o755)
    finished = subprocess.run([str(wrapper), *arguments], capture_output=True, text=True, check=True, timeout=30)
    return finished.stdout.splitlines()


def test_the_build_compiles_as_cxx17_at_o0_without_debug_information_unless_asked_for_horovods_flags(
    tmp_path: Path,
) -> None:
    horovods = ["-std=c++14", "-O3", "-g", "-DNAME=a b", "-c", "ops.cc", "-O2"]
    assert _wrapped(tmp_path, install.DEFAULT_OPTIMIZATION, horovods) == [
        "-std=c++17", "-O0", "-DNAME=a b", "-c", "ops.cc", "-O0"
    ]
    assert _wrapped(tmp_path, 3, horovods) == ["-std=c++17", "-O3", "-g", "-DNAME=a b", "-c", "ops.cc", "-O3"]
    assert _wrapped(tmp_path, 0, ["-g", "-O3"]) == ["-O0"]
    with pytest.raises(install.InstallError, match=r"optimization=4: expected 0, 1, 2 or 3"):
        install.compiler_wrapper("g++", 4)


def test_build_only_runs_as_a_plain_script_and_installs_nothing(tmp_path: Path) -> None:
    # `make setup-all` runs the installer this way before pip has installed anything of contrib/: `python -S` (no
    # site-packages at all) proves that it needs only the standard library. A wheel already in the cache is kept, and
    # nothing is installed (pip would fail on this empty file).
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheel = tmp_path / f"horovod-{install.VERSION}-{tag}-{tag}-linux_x86_64.whl"
    wheel.write_bytes(b"")
    finished = subprocess.run(
        [sys.executable, "-S", install.__file__, "--build-only"], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "CORE_HOROVOD_WHEEL_CACHE": str(tmp_path)},
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines() == [f"core-horovod: the wheel is {wheel}"]
    assert wheel.read_bytes() == b""
