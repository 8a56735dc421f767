"""The documentation site: ``mkdocs build --strict`` passes, renders the references from the docstrings, lists
every page, and fails on a broken link or reference."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def nav_pages(entries: Any) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def text_of(page: Path) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text()))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, (
        f"mkdocs build --strict failed (install the docs tools with the test extras: "
        f"pip install -e '.[test]'):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    return out


@pytest.mark.timeout(360)
def test_the_hook_reference_is_rendered_from_the_hookspecs_docstrings(site: Path) -> None:
    from core import hookspecs

    # Written once: the hook contract page (docs/hooks.md, generated); the API page holds the module's other names.
    html = (site / "hooks" / "index.html").read_text()
    page = text_of(site / "hooks" / "index.html")
    for name in ("strategy_reduce", "accelerator_setup_device", "checkpoint_io_load"):
        assert f'id="core.hookspecs.{name}"' in html
    first_line = (hookspecs.strategy_reduce.__doc__ or "").strip().splitlines()[0]
    assert first_line in page
    # The traits are a list and the policy a section of their own, not one paragraph.
    assert re.search(r"<li>\s*<code>kind</code>", html)
    assert 'id="traits"' in html and 'id="how-the-contract-evolves"' in html
    assert "CONTRACT_VERSION" in text_of(site / "api" / "hookspecs" / "index.html")


@pytest.mark.timeout(360)
def test_the_api_pages_carry_the_public_classes(site: Path) -> None:
    expected = {
        "core": ["resolve", "ClusterInfo", "Supports", "ActiveSet", "ConfigurationError"],
        "lite": ["Lite", "launch", "setup_dataloaders", "all_reduce"],
        "testing": ["StrategyConformance", "AcceleratorConformance", "ExtensionConformance", "plugin_factory"],
        "core_ddp": ["DDPStrategy", "find_unused_parameters"],
        "core_powersgd": ["PowerSGDExtension", "warmup"],
    }
    for page, names in expected.items():
        text = text_of(site / "api" / page / "index.html")
        missing = [name for name in names if name not in text]
        assert not missing, f"api/{page}: {missing}"
    assert (site / "writing-plugins" / "index.html").exists() and (site / "publishing" / "index.html").exists()


@pytest.mark.timeout(360)
def test_the_user_reference_covers_the_classes_users_touch(site: Path) -> None:
    # One page per public package a user imports from, each name under its public path (issue 51).
    expected = {
        "trainer": ["core.Trainer", "core.Trainer.fit", "core.Trainer.predict", "core.trainer.TrainerConfig"],
        "module": ["core.Module", "core.Module.training_step", "core.DataModule"],
        "callbacks": ["core.callbacks.ModelCheckpoint", "core.callbacks.EarlyStopping", "core.callbacks.Callback"],
        "loggers": ["core.loggers.CSVLogger", "core.loggers.TensorBoardLogger", "core.loggers.WandbLogger"],
        "cli": ["core.cli.CoreCLI"],
        "fault_tolerance": ["core.fault_tolerance.ResumableCheckpoints", "core.fault_tolerance.FaultTolerance"],
        "tuner": ["core.tuner.Tuner", "core.tuner.LRFinder"],
        "lightning": ["core.lightning.UnsupportedLightningName"],
        "testing": ["core.testing.DistributedRunConformance.accelerator",
                    "core.testing.DistributedRunConformance.job_timeout"],
    }
    for page, anchors in expected.items():
        html = (site / "api" / page / "index.html").read_text()
        missing = [anchor for anchor in anchors if f'id="{anchor}"' not in html]
        assert not missing, f"api/{page}: {missing}"


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(nav_pages(config["nav"]))
    present = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert present - listed == set(), "add these pages to the nav of mkdocs.yml"
    assert listed - present == set(), "the nav of mkdocs.yml names pages that do not exist"


@pytest.mark.timeout(360)
@pytest.mark.parametrize(
    ("content", "named"),
    [("See [the missing page](missing.md).", "missing.md"), ("::: core.no_such_name", "core.no_such_name")],
)
def test_a_broken_link_or_reference_fails_the_strict_build(tmp_path: Path, content: str, named: str) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    (docs / "broken.md").write_text(f"# Broken\n\n{content}\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["nav"].append({"Broken": "broken.md"})
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT / path) for path in python["paths"]]
            options = python["options"]
            options["extensions"] = [str(ROOT / extension) for extension in options.get("extensions", [])]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert named in output, output[-3000:]


RAW_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|data|exc|mod|obj|const):`?|:param\b|:returns?:|:raises\b|:rtype:"
)


@pytest.mark.timeout(360)
def test_no_page_shows_a_raw_sphinx_role(site: Path) -> None:
    # The docstrings' roles are turned into links or code (scripts/griffe_sphinx_roles.py on the API pages,
    # scripts/sphinx_roles.py for the generated docs/hooks.md).
    found = {}
    for page in sorted(site.rglob("*.html")):
        hits = RAW_ROLE.findall(page.read_text())
        if hits:
            found[str(page.relative_to(site))] = sorted(set(hits))
    assert not found, found
    ddp = (site / "api" / "core_ddp" / "index.html").read_text()
    # `DDPStrategy` in a docstring is a link to its entry, the base class in core.toolkit a link to its page.
    assert 'href="#core_ddp.DDPStrategy"' in ddp
    assert re.search(r'href="[./]*api/toolkit/#core\.toolkit\.strategies\.ParallelStrategy"', ddp) or \
        'href="../toolkit/#core.toolkit.strategies.ParallelStrategy"' in ddp


def api_ids(site: Path) -> set[str]:
    pages = (site / "api").rglob("*.html")
    return {found for page in pages for found in re.findall(r'\bid="([\w.]+)"', page.read_text())}


@pytest.mark.timeout(360)
def test_public_names_are_documented_under_their_public_path(site: Path) -> None:
    import core

    ids = api_ids(site)
    private = sorted(anchor for anchor in ids if any(part.startswith("_") and not part.startswith("__")
                                                       for part in anchor.split(".")))
    assert not private, f"documented under a private path: {private}"
    for name in ("CoreError", "ConfigurationError", "ActiveSet", "resolve", "ResolvedConfig", "Catalog", "Lite"):
        assert f"core.{name}" in ids and hasattr(core, name), name
    text = text_of(site / "api" / "core" / "index.html")
    assert "core._errors" not in text and "core.registry._" not in text


# A dotted path into core or a plugin with a private part: core._errors.CoreError, core.lite._wrappers.X, core_ddp._y.
PRIVATE_PATH = re.compile(r"\bcore(?:_[a-z_]+)?(?:\.[A-Za-z_][A-Za-z0-9_]*)*\._[A-Za-z][A-Za-z0-9_]*")


@pytest.mark.timeout(360)
def test_no_page_shows_a_private_path(site: Path) -> None:
    # Re-exported names keep their private __module__ at run time; the pages show them by their public path (in
    # text, link titles and class bases: scripts/griffe_sphinx_roles.py's PublicPaths), or by their bare name.
    found = {}
    for page in sorted(site.rglob("*.html")):
        hits = PRIVATE_PATH.findall(page.read_text())
        if hits:
            found[str(page.relative_to(site))] = sorted(set(hits))
    assert not found, found
    core_page = (site / "api" / "core" / "index.html").read_text()
    assert 'title="CoreError (core.CoreError)"' in core_page  # Bases: of every error, by the public path
    testing = (site / "api" / "testing" / "index.html").read_text()
    assert "(core.testing.Conformance)" in testing


def test_the_private_path_pattern_finds_what_the_pages_used_to_show() -> None:
    for shown in ("Bases: core._errors.CoreError", 'title="core.testing._base.Conformance"',
                  "core.lite._wrappers.LiteDataLoader", "core_ddp._strategy.DDPStrategy", "core.toolkit.strategies._x"):
        assert PRIVATE_PATH.search(shown), shown
    for public in ("core.CoreError", "core.toolkit.strategies.ParallelStrategy", "core_ddp.DDPStrategy.__init__",
                   "core/trainer/_run.py", "self._x"):
        assert not PRIVATE_PATH.search(public), public


FIRST_PARTY = ROOT / "plugins"


def first_party_classes() -> list[tuple[str, str]]:
    """(module, class name) of every class each first-party plugin under plugins/ exports."""
    import importlib
    import inspect

    classes = []
    for directory in sorted(FIRST_PARTY.iterdir()):
        module_name = directory.name.replace("-", "_")
        if not (directory / module_name / "__init__.py").exists():
            continue
        module = importlib.import_module(module_name)
        classes += [(module_name, name) for name in getattr(module, "__all__", [])
                    if inspect.isclass(getattr(module, name)) and not issubclass(getattr(module, name), BaseException)]
    return classes


@pytest.mark.timeout(360)
def test_every_first_party_plugin_class_is_documented_with_its_hooks(site: Path) -> None:
    from core._markers import PROJECT_NAME

    ids = api_ids(site)
    missing = []
    for module_name, class_name in first_party_classes():
        path = f"{module_name}.{class_name}"
        if path not in ids:
            missing.append(path)
            continue
        cls = getattr(__import__(module_name), class_name)
        hooks = [name for name in dir(cls) if hasattr(getattr(cls, name, None), f"{PROJECT_NAME}_impl")]
        missing += [f"{path}.{hook}" for hook in hooks if f"{path}.{hook}" not in ids]
    assert not missing, f"not on the API pages: {missing}"
    for member in ("active", "communicator", "strategy_launch", "strategy_configure_ddp", "strategy_reduce"):
        assert f"core_ddp.DDPStrategy.{member}" in ids, member
