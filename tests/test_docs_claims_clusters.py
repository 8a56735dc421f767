"""docs/clusters.md and docs/publishing.md against the code (issue 51): the detection priorities the cluster page
quotes are the installed environments' own (the outside engines' included), its validation example is the message
the ``slurm`` environment raises, and the entry-point groups the publishing page lists are the ones discovery reads.
"""

from __future__ import annotations

import re

import pytest
from test_doc_blocks import ROOT

import core
from core._records import ENTRY_POINT_GROUPS
from core.registry._discovery import load

CLUSTERS = ROOT / "docs" / "clusters.md"
PUBLISHING = ROOT / "docs" / "publishing.md"


def _section(text: str, heading: str) -> str:
    """The text of the section under ``heading`` (a ``## `` line), up to the next heading of that level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_detection_priorities_clusters_md_quotes_are_the_installed_environments() -> None:
    section = _section(CLUSTERS.read_text(), "Detection order, and why")
    quoted = {alias: int(number) for alias, number in re.findall(r"`(\w+)` \((-?\d+)\)", section)}
    assert {"torchelastic", "slurm", "lsf", "mpi", "local", "ray_worker", "horovod"} <= set(quoted), quoted
    catalog = core.discover()
    installed = {info.alias for info in catalog.of_kind("environment")}
    missing = set(quoted) - installed
    if missing - {"ray_worker", "horovod"}:
        pytest.fail(f"first-party environments not installed: {sorted(missing)}")
    if missing:
        pytest.skip(f"outside engines not installed (make setup-all): {sorted(missing)}")
    found = {
        alias: core.traits_of(load(catalog.lookup("environment", alias)), "environment").priority for alias in quoted
    }
    assert found == quoted
    # kubeflow is never detected, whatever its priority: its detect hook always declines.
    kubeflow = load(catalog.lookup("environment", "kubeflow"))
    assert kubeflow.environment_detect() is None  # type: ignore[attr-defined]


def test_the_validation_example_is_the_slurm_environments_message(monkeypatch: pytest.MonkeyPatch) -> None:
    core_slurm = pytest.importorskip("core_slurm")
    block = re.search(r"```text\n(devices=3 per node.*?)```", CLUSTERS.read_text(), flags=re.DOTALL)
    assert block is not None, "clusters.md no longer shows the validation example"
    shown = " ".join(block.group(1).split())
    task = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2",
            "SLURM_NNODES": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    for name, value in task.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(core.ConfigurationError) as refused:
        core_slurm.SLURMEnvironment().environment_validate_settings(devices_per_node=3, num_nodes=1)
    assert str(refused.value) == shown


def test_the_entry_point_groups_publishing_md_lists_are_the_ones_discovery_reads() -> None:
    section = _section(PUBLISHING.read_text(), "Entry points")
    listed = dict(re.findall(r"^\| (\w+) \| `(core\.\w+)` \|", section, flags=re.MULTILINE))
    assert listed == ENTRY_POINT_GROUPS
