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

    page = text_of(site / "api" / "hookspecs" / "index.html")
    for name in ("strategy_reduce", "accelerator_setup_device", "checkpoint_io_load", "CONTRACT_VERSION"):
        assert name in page
    first_line = (hookspecs.strategy_reduce.__doc__ or "").strip().splitlines()[0]
    assert first_line in page


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
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert named in output, output[-3000:]
