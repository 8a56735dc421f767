"""The README's usage line, as a user runs it: built distributions, a file index, an empty venv, outside the clone.

One venv serves the whole module (its tests run in order): the wheels and sdists of core, core-ddp, core-tpu and
core-slurm are built by scripts/build_dist.py (what `make dist` runs for every distribution) with its PEP 503 index,
the README's `pip install core-ddp core-tpu core-slurm` installs from that index into an empty venv, and a 2-process
ddp job selected by alias trains from a directory outside the clone. Then the plugins are uninstalled, leaving
core and its dependencies only, and such a minimal install must print no warning. Last, the migration guide's
`pip install 'core[lightning]' core-lightning-alias` goes into that venv (core, torch and core's dependencies only)
and must bring what `pip install lightning` brings a Fabric program, with no Lightning distribution.

Our index is the `--index-url` and PyPI the `--extra-index-url`, as in the README; pip's configured extra indexes
(local mirrors on this machine, listed before PyPI so that they serve what they hold) and find-links stay in force.
The torch pin is constraints.txt's, so torch is the CPU build this machine's pip finds (not PyPI's CUDA build).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
USAGE = re.compile(r"^pip install (core-[a-z-]+(?: core-[a-z-]+)*)$", re.MULTILINE)
pytestmark = pytest.mark.timeout(600)
BUILT = (".whl", ".tar.gz")
LIGHTNING_PLUGINS = ("core-cuda", "core-ddp", "core-fsdp", "core-model-parallel", "core-amp", "core-dcp")
"""What core's ``lightning`` extra requires: the plugins behind Lightning's accelerators, strategies and precisions."""


def _readme_usage_line() -> list[str]:
    """The distributions the README's usage line installs (the line alone in a ```bash block)."""
    found = USAGE.findall((ROOT / "README.md").read_text())
    assert found, "README.md has no line `pip install core-ddp ...` alone in a code block"
    return found[0].split()


def _built() -> list[str]:
    """The distributions the module builds: core, the README's line, then what the lightning extra and alias add."""
    return [*dict.fromkeys(["core", *_readme_usage_line(), *LIGHTNING_PLUGINS, "core-lightning-alias"])]


def _extra_indexes() -> list[str]:
    """pip's configured extra indexes (they would be replaced by the command line's), then PyPI."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True,
    ).stdout
    configured = [line.partition("=")[2].strip("'\"") for line in listed.splitlines()
                  if re.match(r"^[^=]*\.extra-index-url=", line)]
    indexes = [url for value in configured for url in value.split()]
    return [*dict.fromkeys([*indexes, "https://pypi.org/simple"])]


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH into the clone, no plugin switches, no warning filters."""
    drop = ("PYTHONPATH", "PYTHONWARNINGS", "VIRTUAL_ENV", "CORE_STRICT_PLUGINS", "CORE_DISABLE_PLUGINS",
            "CORE_PLUGINS_AUTOLOAD")
    return {key: value for key, value in os.environ.items() if key not in drop} | {"OMP_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Venv:
    python: Path
    index: Path
    away: Path  # a working directory outside the clone
    install_output: str

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args], cwd=self.away, env=_clean_env(), capture_output=True, text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("dist")
    wheelhouse = base / "dist"
    sources = [".", *(f"plugins/{name}" for name in _built()[1:])]
    subprocess.run(
        [sys.executable, "scripts/build_dist.py", "--out", str(wheelhouse), *sources],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=300,
    )
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=120)
    python = base / "venv" / "bin" / "python"
    index = wheelhouse / "simple"
    command = [str(python), "-m", "pip", "install", "--index-url", index.as_uri(), "-c", str(ROOT / "constraints.txt")]
    for url in _extra_indexes():
        command += ["--extra-index-url", url]
    away = base / "elsewhere"
    away.mkdir()
    installed = subprocess.run(
        [*command, *_readme_usage_line()], cwd=away, env=_clean_env(), capture_output=True, text=True, timeout=420,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return Venv(python, index, away, installed.stdout)


def test_the_index_lists_every_file_with_its_hash_and_the_rendered_readme(venv: Venv) -> None:
    names = {path.name for path in venv.index.iterdir() if path.is_dir()}
    assert names == set(_built())
    page = (venv.index / "core-ddp" / "index.html").read_text()
    links = re.findall(r'href="\.\./\.\./([^"#]+)#sha256=([0-9a-f]{64})"', page)
    assert {name for name, _ in links} == {"core_ddp-0.1.0-py3-none-any.whl", "core_ddp-0.1.0.tar.gz"}
    for name, digest in links:
        assert hashlib.sha256((venv.index.parent / name).read_bytes()).hexdigest() == digest
    assert 'data-requires-python="&gt;=3.10"' in page
    assert "<table>" in page and "<code>ddp_spawn</code>" in page  # the README as Markdown rendered, not raw text


def test_twine_check_passes_for_the_built_files(venv: Venv) -> None:
    files = sorted(str(path) for path in venv.index.parent.iterdir() if path.is_file())
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == len(files) == 2 * len(_built())


def _build_dist() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dist", ROOT / "scripts" / "build_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_upload_plan_puts_every_distribution_after_those_it_requires(venv: Venv) -> None:
    planned = subprocess.run(
        [sys.executable, "scripts/build_dist.py", "--out", str(venv.index.parent), "--upload-plan"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.splitlines()
    assert len(planned) == len(_built())
    core_files = [str(venv.index.parent / name) for name in ("core-0.1.0-py3-none-any.whl", "core-0.1.0.tar.gz")]
    assert planned[0] == " ".join(["twine", "upload", *core_files])
    order = _build_dist().upload_order({
        "core": ["torch>=2.2"],
        "core-pipeline": ["core>=0.1,<0.2", "core-model-parallel>=0.1"],
        "core-model-parallel": ["core>=0.1", "core-dcp>=0.1", 'core-ddp>=0.1; extra == "test"'],
        "core-dcp": ["core>=0.1"],
        "core-ddp": ["Core>=0.1"],
    })
    assert order == ["core", "core-dcp", "core-ddp", "core-model-parallel", "core-pipeline"]
    with pytest.raises(SystemExit, match="in a cycle: core-a, core-b"):
        _build_dist().upload_order({"core-a": ["core-b"], "core-b": ["core-a"]})


def test_the_usage_line_installs_the_built_wheels_not_the_clone(venv: Venv) -> None:
    wanted = {"core", *_readme_usage_line()}
    shown = venv.run("-m", "pip", "list", "--format", "freeze").stdout
    versions = dict(line.split("==") for line in shown.splitlines() if "==" in line)
    assert {name: versions.get(name) for name in wanted} == dict.fromkeys(wanted, "0.1.0")
    where = venv.run("-c", "import core, core_ddp, core_slurm, core_tpu as m; print(core.__file__, m.__file__)")
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout
    checked = venv.run("-m", "pip", "check")
    assert checked.returncode == 0, checked.stdout


def _distributions() -> list[Path]:
    return [ROOT, *sorted(path.parent for path in ROOT.glob("plugins/*/pyproject.toml")),
            *sorted(path.parent for path in ROOT.glob("contrib/*/pyproject.toml"))]


def test_every_built_wheel_and_sdist_carries_the_license_text(venv: Venv) -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence  # the full text, not a notice
    built = sorted(path for path in venv.index.parent.iterdir() if path.name.endswith(BUILT))
    assert len(built) == 2 * len(_built())
    for path in built:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                names = [name for name in wheel.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
                assert len(names) == 1, f"{path.name}: {wheel.namelist()}"
                assert wheel.read(names[0]).decode() == licence, path.name
                metadata = wheel.read(names[0].replace("licenses/LICENSE", "METADATA")).decode()
        else:
            with tarfile.open(path) as sdist:
                member = sdist.getmember(f"{path.name[:-len('.tar.gz')]}/LICENSE")
                assert member.isfile(), f"{path.name}: LICENSE is a link, not the text"
                handle = sdist.extractfile(member)
                assert handle is not None and handle.read().decode() == licence, path.name
                info = sdist.extractfile(f"{path.name[:-len('.tar.gz')]}/PKG-INFO")
                assert info is not None, path.name
                metadata = info.read().decode()
        assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata, path.name
        assert "Project-URL" not in metadata, path.name  # no invented home page


def test_every_distribution_ships_the_license_and_declares_no_placeholder_url() -> None:
    """The distributions the module does not build (every one under plugins/ and contrib/) ship it the same way:
    ``license-files`` names their ``LICENSE``, which is the root's text (a link to it; the sdist stores the text)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; CI runs 3.11
    licence = (ROOT / "LICENSE").read_text()
    for directory in _distributions():
        project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
        name = project["name"]
        assert project["license"] == "Apache-2.0" and project.get("license-files") == ["LICENSE"], name
        assert (directory / "LICENSE").read_text() == licence, name
        assert "urls" not in project, f"{name}: project URLs point nowhere true; there is no public home page"


def test_plugins_are_listed_by_the_installed_core(venv: Venv) -> None:
    listed = venv.run("-m", "core.plugins")
    assert listed.returncode == 0, listed.stderr
    rows = {tuple(line.split()[:3]) for line in listed.stdout.splitlines()}
    assert {("strategy", "ddp", "core-ddp"), ("accelerator", "tpu", "core-tpu"), ("strategy", "xla", "core-tpu"),
            ("environment", "slurm", "core-slurm"), ("strategy", "single_device", "core")} <= rows
    assert not any(row[2] in ("core-fsdp", "core-amp") for row in rows if len(row) == 3)
    assert listed.stderr == ""


def test_a_two_process_ddp_job_trains_by_alias_outside_the_clone(venv: Venv) -> None:
    script = venv.away / "train.py"
    script.write_text(textwrap.dedent('''
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        import core


        def train(lite):
            torch.manual_seed(0)
            features = torch.randn(64, 4)
            data = TensorDataset(features, features.sum(dim=1, keepdim=True))
            loader = lite.setup_dataloaders(DataLoader(data, batch_size=8))
            model = torch.nn.Linear(4, 1)
            model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
            for _ in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    lite.backward(loss)
                    optimizer.step()
            weights = torch.cat([p.detach().flatten() for p in model.parameters()])
            gathered = lite.all_gather(weights)
            lite.print(f"world {lite.world_size} strategy {type(lite.strategy).__module__}")
            lite.print(f"replicas equal {bool(torch.equal(gathered[0], gathered[1]))} loss {loss.item():.4f}")


        if __name__ == "__main__":
            core.Lite(accelerator="cpu", strategy="ddp", devices=2).launch(train)
    '''))
    ran = venv.run(str(script), timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "world 2 strategy core_ddp" in ran.stdout
    assert "replicas equal True" in ran.stdout


def test_a_minimal_install_is_quiet(venv: Venv) -> None:
    """core alone (the plugins uninstalled): no warning on import, on listing, on --check or on a run.

    torch warns "Failed to initialize NumPy" on every import when numpy is missing, which is why numpy is a
    dependency of core; this runs after every test of the README's line because it uninstalls the plugins.
    """
    removed = venv.run("-m", "pip", "uninstall", "--yes", *_readme_usage_line())
    assert removed.returncode == 0, removed.stderr
    left = venv.run("-m", "core.plugins", "--json")
    assert left.returncode == 0 and '"core-ddp"' not in left.stdout and '"core"' in left.stdout
    for command in (
        ["-c", "import core"],
        ["-m", "core.plugins"],
        ["-m", "core.plugins", "--check"],
        ["-c", "import core; core.Lite(accelerator='cpu').launch(lambda lite: print('ran', lite.world_size))"],
    ):
        ran = venv.run(*command)
        assert ran.returncode == 0, ran.stderr
        assert ran.stderr == "", f"{command}: {ran.stderr}"
    assert "ran 1" in ran.stdout


def test_the_lightning_extra_and_the_alias_install_what_lightning_brings(venv: Venv) -> None:
    """The migration guide's install line, after test_a_minimal_install_is_quiet left core alone in the venv."""
    command = ["-m", "pip", "install", "--index-url", venv.index.as_uri(), "-c", str(ROOT / "constraints.txt")]
    for url in _extra_indexes():
        command += ["--extra-index-url", url]
    installed = venv.run(*command, "core[lightning]", "core-lightning-alias", timeout=480)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    listed = venv.run("-m", "pip", "list", "--format", "freeze").stdout
    versions = dict(line.lower().split("==") for line in listed.splitlines() if "==" in line)
    expected = (*LIGHTNING_PLUGINS, "core", "core-lightning-alias")
    assert {name: versions.get(name) for name in expected} == dict.fromkeys(expected, "0.1.0")
    assert {"torchmetrics", "lightning-utilities", "jsonargparse"} <= set(versions)
    assert not {"lightning", "pytorch-lightning", "lightning-fabric"} & set(versions)
    ran = venv.run(
        "-c",
        "import lightning as L, core.lightning, torchmetrics, lightning_utilities\n"
        "from lightning.fabric.strategies import FSDPStrategy, ModelParallelStrategy\n"
        "from lightning.fabric.accelerators import CUDAAccelerator\n"
        "assert L is core.lightning and L.Fabric(accelerator='cpu', devices=1).world_size == 1\n"
        "print(CUDAAccelerator.auto_device_count(), FSDPStrategy.__module__, ModelParallelStrategy.__module__)",
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0", "core_fsdp._strategy", "core_model_parallel._strategy"]
