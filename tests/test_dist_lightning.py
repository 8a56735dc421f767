"""``pip install 'core[lightning]' core-lightning-alias``, the migration guide's first line, into an empty venv.

The eight distributions it names are built by scripts/build_dist.py into a PEP 503 index of their own, installed as
tests/test_dist.py installs the README's line (our index first, the configured mirrors after, torch from
constraints.txt), and the installed venv must hold what ``pip install lightning`` brings a Fabric program (the
plugins, torchmetrics, lightning-utilities, jsonargparse) with ``import lightning`` answered by core, and no
Lightning distribution.
"""

from __future__ import annotations

import subprocess
import sys
import venv as venvs
from pathlib import Path

import pytest
from test_dist import _clean_env, _extra_indexes

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ("core-cuda", "core-ddp", "core-fsdp", "core-model-parallel", "core-amp", "core-dcp")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_lightning_extra_and_the_alias_install_what_lightning_brings(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "dist"
    sources = [".", *(f"plugins/{name}" for name in (*PLUGINS, "core-lightning-alias"))]
    subprocess.run([sys.executable, "scripts/build_dist.py", "--out", str(wheelhouse), *sources],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=300)
    venvs.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    command = [str(python), "-m", "pip", "install", "--index-url", (wheelhouse / "simple").as_uri(),
               "-c", str(ROOT / "constraints.txt")]
    for url in _extra_indexes():
        command += ["--extra-index-url", url]
    away = tmp_path / "elsewhere"
    away.mkdir()
    installed = subprocess.run([*command, "core[lightning]", "core-lightning-alias"], cwd=away, env=_clean_env(),
                               capture_output=True, text=True, timeout=480)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "freeze"], capture_output=True, text=True,
                            check=True, cwd=away, env=_clean_env()).stdout
    versions = dict(line.lower().split("==") for line in listed.splitlines() if "==" in line)
    assert {name: versions.get(name) for name in (*PLUGINS, "core", "core-lightning-alias")} == dict.fromkeys(
        (*PLUGINS, "core", "core-lightning-alias"), "0.1.0")
    assert {"torchmetrics", "lightning-utilities", "jsonargparse"} <= set(versions)
    assert not {"lightning", "pytorch-lightning", "lightning-fabric"} & set(versions)
    ran = subprocess.run(
        [str(python), "-c",
         "import lightning as L, core.lightning, torchmetrics, lightning_utilities\n"
         "from lightning.fabric.strategies import FSDPStrategy, ModelParallelStrategy\n"
         "from lightning.fabric.accelerators import CUDAAccelerator\n"
         "assert L is core.lightning and L.Fabric(accelerator='cpu', devices=1).world_size == 1\n"
         "print(CUDAAccelerator.auto_device_count(), FSDPStrategy.__module__, ModelParallelStrategy.__module__)"],
        cwd=away, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0", "core_fsdp._strategy", "core_model_parallel._strategy"]
