"""docs/tutorial-accelerator.md's plugin, installed as a real distribution, passes the conformance kit: alone
(AcceleratorConformance, by its alias) and paired with core-ddp on two processes and with core-amp's bf16-mixed
(the page's test_vdev_pairing.py, which the doc-block test cannot run because it needs the plugin installed).
The page's files are taken from the page itself, so the test fails when the page's code breaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Installer
from test_doc_blocks import ROOT, blocks_of

import core

PAGE = ROOT / "docs" / "tutorial-accelerator.md"


def page_files() -> dict[str, str]:
    """The page's python blocks that start with ``# name.py``, by name."""
    return {block.script_name: block.source for block in blocks_of(PAGE) if block.script_name}


def install_vdev(installed: Installer, alias: str = "vdev") -> None:
    installed("core-vdev", {"accelerator": {alias: "core_vdev:VdevAccelerator"}},
              modules={"core_vdev": page_files()["core_vdev.py"]})


def test_the_page_has_the_plugin_and_both_test_files() -> None:
    files = page_files()
    assert {"core_vdev.py", "test_vdev.py", "test_vdev_pairing.py"} <= set(files), sorted(files)
    import core.testing  # the settings the page's pairing test sets are public, on an exported class

    assert "DistributedRunConformance" in core.testing.__all__
    assert {"accelerator", "devices", "job_timeout", "launcher"} <= set(vars(core.testing.DistributedRunConformance))


@pytest.mark.timeout(600)
def test_the_tutorial_plugin_passes_the_kit_alone_and_with_ddp_and_amp(
    installed: Installer, tmp_path: Path
) -> None:
    install_vdev(installed)
    files = page_files()
    (tmp_path / "test_vdev.py").write_text(files["test_vdev.py"].replace(
        'plugin_factory = "core_vdev:VdevAccelerator"', 'alias = "vdev"'))
    (tmp_path / "test_vdev_pairing.py").write_text(files["test_vdev_pairing.py"])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "test_vdev.py", "test_vdev_pairing.py"],
        cwd=tmp_path, env={**installed.env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=560,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # The CPU stand-in is available, so no test skips for want of the device; the only skips are the precision kit's
    # optional hooks that core-amp leaves to Lite's defaults.
    skips = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    assert all("is optional and not implemented" in line for line in skips), output[-3000:]
    assert "passed" in output.splitlines()[-1]


def test_auto_ranks_the_tutorial_plugin_by_its_priority(installed: Installer, monkeypatch: pytest.MonkeyPatch) -> None:
    install_vdev(installed)
    # Priority 15: above the built-in cpu (0), so `auto` picks it where it is available and no GPU or TPU is.
    assert core.resolve(accelerator="auto").config.accelerator == "vdev"
    monkeypatch.setenv("VDEV_VISIBLE_DEVICES", "0")
    assert core.resolve(accelerator="auto").config.accelerator == "cpu"


def test_a_bad_devices_request_names_what_is_visible(installed: Installer) -> None:
    install_vdev(installed)
    with pytest.raises(core.ConfigurationError, match="sees 2 vdev device"):
        core.Lite(accelerator="vdev", devices=3)


def test_a_vendor_plugin_may_claim_hpu(installed: Installer) -> None:
    with pytest.raises(core.PluginUnavailableError, match="Habana"):
        core.resolve(accelerator="hpu")  # known to core, nothing installed: says what is missing
    install_vdev(installed, alias="hpu")
    active = core.resolve(accelerator="hpu")  # the installed plugin owns the alias
    assert type(active.accelerator).__name__ == "VdevAccelerator"
