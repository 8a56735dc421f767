"""``python -m core.plugins new KIND NAME``: a generated package installs, passes its tests and works by alias.

One temporary virtual environment holds the six generated packages, one per kind, installed with pip
like any outside distribution. It is created with ``--system-site-packages`` from this interpreter, but
``.venv`` is itself a virtual environment, so that flag alone exposes the base interpreter's packages, not
``.venv``'s: a ``.pth`` file adds ``.venv``'s site directory (core, torch, pytest) behind the temporary
environment's own, which is what "installed together with core" means here without reinstalling torch.
Nothing of the core is edited: the generated packages live in a temporary directory, and the run by alias
uses the core of this checkout as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from packaging.specifiers import SpecifierSet

import core
from core._records import ENTRY_POINT_GROUPS, KINDS
from core.hookspecs import CONTRACT_VERSION
from core.plugins._new import check_unclaimed, class_name_for, compatible_range, generate
from core.registry._discovery import discover

ROOT = Path(__file__).resolve().parents[1]
NAMES = {kind: "tpl-" + kind.replace("_", "-") for kind in KINDS}

TWO_PROCESS_RUN = '''
import json, sys
import torch
import core

def train(lite, out):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = lite.setup(model, optimizer)
    loss = model(torch.ones(8, 4, device=lite.device)).square().mean()
    lite.backward(loss)
    optimizer.step()
    lite.save(out + "/state.ckpt", {"model": model, "optimizer": optimizer})
    lite.load(out + "/state.ckpt", {"model": model, "optimizer": optimizer})
    total = lite.all_reduce(torch.tensor([lite.global_rank + 1.0]), reduce_op="sum")
    if lite.global_rank == 0:
        extension = lite.active.extensions["tpl-extension"]
        report = {
            "config": {kind: getattr(lite.active.config, kind) for kind in
                       ("accelerator", "strategy", "precision", "environment", "checkpoint_io")},
            "extensions": list(lite.active.config.extensions),
            "strategy_class": [cls.__module__ + "." + cls.__name__ for cls in type(lite.active.strategy).__mro__],
            "world_size": lite.world_size,
            "sum": total.tolist(),
            "extension_calls": dict(extension.calls),
        }
        with open(out + "/report.json", "w") as file:
            json.dump(report, file)

if __name__ == "__main__":
    lite = core.Lite(accelerator="tpl-accelerator", strategy="tpl-strategy", precision="tpl-precision",
                     devices=2, plugins=["tpl-checkpoint-io", "tpl-extension"])
    lite.launch(train, sys.argv[1])
'''


@attrs.frozen
class Sandbox:
    """A virtual environment with the generated packages installed, and how long each step took."""

    python: Path
    packages: Path
    seconds: dict[str, float]

    def run(self, *arguments: str, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
        environment["OMP_NUM_THREADS"] = "1"
        return subprocess.run(
            [str(self.python), *arguments], capture_output=True, text=True, timeout=timeout, env=environment,
            cwd=cwd or self.packages,
        )


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    base = tmp_path_factory.mktemp("template")
    packages = base / "packages"
    seconds: dict[str, float] = {}

    started = time.monotonic()
    for kind, name in NAMES.items():
        created = subprocess.run(
            [sys.executable, "-m", "core.plugins", "new", kind, name, "--directory", str(packages)],
            capture_output=True, text=True, timeout=120,
        )
        assert created.returncode == 0, created.stderr
        assert f"Created {packages / ('core-' + name)}" in created.stdout
    seconds["generate"] = time.monotonic() - started

    started = time.monotonic()
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    development_site = sysconfig.get_paths()["purelib"]
    Path(site, "_core_development.pth").write_text(f"import site; site.addsitedir({development_site!r})\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-build-isolation", *(str(packages / f"core-{name}") for name in NAMES.values())],
        capture_output=True, text=True, timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    seconds["venv and pip install"] = time.monotonic() - started

    yield Sandbox(python, packages, seconds)


def test_the_environment_sees_core_and_torch_from_the_development_environment(sandbox: Sandbox) -> None:
    import torch

    where = sandbox.run("-c", "import core, torch; print(core.__file__); print(torch.__file__)", timeout=120)
    assert where.stdout.split() == [core.__file__, torch.__file__], where.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_generated_packages_are_complete(kind: str, tmp_path: Path) -> None:
    name = NAMES[kind]
    package = f"core_{name.replace('-', '_')}"
    root = generate(kind, name, tmp_path)
    assert root == tmp_path / f"core-{name}"
    files = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    assert files == ["README.md", f"{package}/__init__.py", f"{package}/py.typed", "pyproject.toml",
                     f"tests/test_{package}.py"]
    pyproject = (root / "pyproject.toml").read_text()
    assert f'[project.entry-points."{ENTRY_POINT_GROUPS[kind]}"]' in pyproject
    assert f'"{name}" = "{package}:' in pyproject
    assert f'"core{compatible_range(core.__version__)}"' in pyproject
    assert "core-ddp" not in pyproject  # the strategy is written on the core's ParallelStrategy
    assert 'test = ["pytest>=8.0"' in pyproject
    assert "pip install -e '.[test]'\npytest\n" in (root / "README.md").read_text()
    assert f"contract_version = {CONTRACT_VERSION}" in (root / package / "__init__.py").read_text()
    compile((root / package / "__init__.py").read_text(), f"{package}/__init__.py", "exec")


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.1.0", ">=0.1,<0.2"), ("0.7.3", ">=0.7,<0.8"), ("1.4.2", ">=1.4,<2"), ("2.0", ">=2.0,<3")],
)
def test_the_core_range_allows_the_compatible_releases(version: str, expected: str) -> None:
    assert compatible_range(version) == expected


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Mine", "'Mine' is not a plugin name: use lower-case letters and digits, optionally joined by '-' or '_', "
                 "starting with a letter (for example 'mine' or 'fast-ddp')."),
        ("core-fast", "Name the plugin without the 'core' prefix: 'core-fast' would become 'core-core-fast'; "
                      "use 'fast'."),
    ],
)
def test_bad_names_are_refused_with_the_fix(name: str, message: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core.plugins", "new", "strategy", name, "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert (result.returncode, result.stderr.strip()) == (1, f"error: {message}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [("strategy", "localsgd", "LocalSGDStrategy"), ("strategy", "fast-ddp", "FastDDPStrategy"),
     ("precision", "int8", "Int8Precision"), ("checkpoint_io", "s3_io", "S3IOCheckpointIO"),
     ("strategy", "mine", "MineStrategy"), ("accelerator", "my-gpu", "MyGPUAccelerator")],
)
def test_class_names_are_derived_sensibly(kind: str, name: str, expected: str) -> None:
    assert class_name_for(kind, name) == expected


def test_the_class_name_can_be_chosen(tmp_path: Path) -> None:
    root = generate("strategy", "lsgd", tmp_path, class_name="LocalSGD")
    assert "class LocalSGD(ParallelStrategy):" in (root / "core_lsgd" / "__init__.py").read_text()
    assert '"lsgd" = "core_lsgd:LocalSGD"' in (root / "pyproject.toml").read_text()
    with pytest.raises(core.ConfigurationError, match="--class-name 'local-sgd' is not a class name"):
        generate("strategy", "other", tmp_path, class_name="local-sgd")


def test_a_directory_named_like_the_package_is_its_root(tmp_path: Path) -> None:
    root = generate("strategy", "mine", tmp_path / "core-mine")
    assert root == tmp_path / "core-mine"
    assert (root / "pyproject.toml").is_file() and not (root / "core-mine").exists()


@pytest.mark.parametrize(
    ("kind", "name", "message"),
    [
        ("strategy", "ddp", "error: Cannot create core-ddp: the strategy alias 'ddp' is already provided by core-ddp "
                            "(installed here); a second one would make every strategy='ddp' a conflict, and a package "
                            "core_ddp would shadow its module. Choose another name, e.g. python -m core.plugins new "
                            "strategy ddp-mine."),
        ("strategy", "slurm", "error: Cannot create core-slurm: the distribution name 'core-slurm' is already taken by "
                              "core-slurm, and a package core_slurm would shadow its module. Choose another name, e.g. "
                              "python -m core.plugins new strategy slurm-mine."),
    ],
)
def test_a_name_already_taken_is_refused(kind: str, name: str, message: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core.plugins", "new", kind, name, "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert (result.returncode, result.stderr.strip()) == (1, message)
    assert list(tmp_path.iterdir()) == []


def test_a_first_party_alias_that_is_not_installed_is_refused_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.registry import _discovery

    monkeypatch.setattr(_discovery, "first_party", lambda: {("strategy", "gossip"): "core-gossip"})
    with pytest.raises(core.ConfigurationError) as refused:
        check_unclaimed("strategy", "gossip")
    assert str(refused.value) == (
        "Cannot create core-gossip: the strategy alias 'gossip' is already provided by core-gossip (first-party, "
        "pip install core-gossip); a second one would make every strategy='gossip' a conflict, and a package "
        "core_gossip would shadow its module. Choose another name, e.g. python -m core.plugins new strategy "
        "gossip-mine."
    )
    check_unclaimed("precision", "whisper")  # a name nobody has: free


def test_the_alias_may_differ_from_the_distribution_name(tmp_path: Path) -> None:
    root = generate("precision", "quantized", tmp_path, alias="int4-mine")
    pyproject = (root / "pyproject.toml").read_text()
    assert root.name == "core-quantized" and 'name = "core-quantized"' in pyproject
    assert '"int4-mine" = "core_quantized:' in pyproject, pyproject
    assert 'precision="int4-mine"' in (root / "README.md").read_text()
    # The alias is what must be free: a first-party alias is refused even under a new distribution name.
    with pytest.raises(core.ConfigurationError, match="the precision alias 'fp8' is already provided by core-torchao"):
        check_unclaimed("precision", "quantized", "fp8")


def test_an_existing_package_is_not_overwritten(tmp_path: Path) -> None:
    generate("precision", "mine", tmp_path)
    with pytest.raises(core.ConfigurationError, match="core-mine already exists and is not empty"):
        generate("precision", "mine", tmp_path)


@pytest.mark.distributed  # the generated strategy package runs the conformance kit's 2-process jobs
def test_generated_tests_pass(sandbox: Sandbox) -> None:
    report = sandbox.packages / "report.xml"
    started = time.monotonic()
    result = sandbox.run(
        "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}",
        *(f"core-{name}/tests" for name in NAMES.values()), timeout=900,
    )
    sandbox.seconds["generated tests"] = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    classes = {case.get("classname", "").rsplit(".", 1)[-1] for case in ElementTree.parse(report).iter("testcase")}
    assert classes == {
        "TestTplAccelerator", "TestTplStrategy", "TestTplPrecision", "TestTplEnvironment", "TestTplCheckpointIO",
        "TestTplExtension",
    }  # a name ending in its kind is not suffixed twice
    print(f"template timings: {sandbox.seconds}")


def test_listed_by_metadata_in_that_environment_only(sandbox: Sandbox) -> None:
    listed = sandbox.run("-m", "core.plugins", "--json", timeout=120)
    rows = {(row["kind"], row["alias"]): row for row in json.loads(listed.stdout)}
    for kind, name in NAMES.items():
        row = rows[(kind, name)]
        assert (row["distribution"], row["status"], row["version"]) == (f"core-{name}", "ok", "0.1.0")
        assert SpecifierSet(row["requires_core"]) == SpecifierSet(compatible_range(core.__version__))
    assert not {alias for alias in NAMES.values()} & {info.alias for info in discover().entries}


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_used_by_alias_in_a_two_process_run(sandbox: Sandbox, tmp_path: Path) -> None:
    script = tmp_path / "two_process_run.py"
    script.write_text(textwrap.dedent(TWO_PROCESS_RUN))
    result = sandbox.run(str(script), str(tmp_path), timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"] == {
        "accelerator": "tpl-accelerator", "strategy": "tpl-strategy", "precision": "tpl-precision",
        "environment": "local", "checkpoint_io": "tpl-checkpoint-io",
    }
    assert report["extensions"] == ["tpl-extension"]
    assert "core.toolkit.strategies._parallel.ParallelStrategy" in report["strategy_class"]
    assert not [name for name in report["strategy_class"] if name.startswith("core_ddp")]
    assert (report["world_size"], report["sum"]) == (2, [3.0])
    assert report["extension_calls"]["all_reduce"] >= 1 and report["extension_calls"]["barrier"] >= 1
