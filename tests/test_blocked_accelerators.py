"""IPU (Graphcore) and HPU (Habana / Intel Gaudi): known to core, not installable, refused with the reason.

Their aliases are data in core/registry/first_party.json ("blocked"). ``python -m core.plugins`` lists them as
unavailable; selecting one (``accelerator=``, ``strategy=``, ``plugins=[...]``, on Lite or the Trainer) raises
:class:`core.PluginUnavailableError` naming the vendor software, why it is not on the package index, and how a
plugin built on it would map the hooks. No device or vendor library is touched: none exists here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import core
from core.registry._discovery import blocked_aliases, discover

GRAPHCORE = {("accelerator", "ipu"), ("strategy", "ipu_strategy")}
HABANA = {("accelerator", "hpu"), ("strategy", "hpu_single"), ("strategy", "hpu_parallel")}


def resolve_with(kind: str, alias: str) -> None:
    if kind == "accelerator":
        core.resolve(accelerator=alias)
    else:
        core.resolve(strategy=alias)


def test_the_index_blocks_exactly_the_five_aliases() -> None:
    assert set(blocked_aliases()) == GRAPHCORE | HABANA


@pytest.mark.parametrize(("kind", "alias"), sorted(GRAPHCORE))
def test_an_ipu_alias_names_poptorch_and_why_it_is_not_installable(kind: str, alias: str) -> None:
    with pytest.raises(core.PluginUnavailableError) as raised:
        resolve_with(kind, alias)
    message = str(raised.value)
    assert message.startswith(f"{kind}={alias!r} is the Graphcore IPU")
    assert "Graphcore's PopTorch" in message and "Poplar SDK" in message and "lightning-graphcore 0.1.0" in message
    assert "cannot be installed from the package index: poptorch is not on the Python package index" in message
    assert "poptorch.trainingModel(module, poptorch.Options(), optimizer)" in message
    assert "accelerator_is_available = poptorch.ipuHardwareIsAvailable()" in message


@pytest.mark.parametrize(("kind", "alias"), sorted(HABANA))
def test_an_hpu_alias_names_synapseai_and_lightning_habana(kind: str, alias: str) -> None:
    with pytest.raises(core.PluginUnavailableError) as raised:
        resolve_with(kind, alias)
    message = str(raised.value)
    assert message.startswith(f"{kind}={alias!r} is the Intel Gaudi (Habana) HPU")
    assert "SynapseAI" in message and "lightning-habana" in message
    assert "habana_frameworks.torch is not on the Python package index" in message
    assert "accelerator_process_group_backend = 'hccl'" in message and "htcore.mark_step()" in message


def test_lite_and_the_trainer_refuse_them_the_same_way() -> None:
    with pytest.raises(core.PluginUnavailableError, match=r"^accelerator='hpu' is the Intel Gaudi"):
        core.Trainer(accelerator="hpu", logger=False, enable_checkpointing=False)
    with pytest.raises(core.PluginUnavailableError, match=r"^strategy='ipu_strategy' is the Graphcore IPU"):
        core.Lite(strategy="ipu_strategy")
    with pytest.raises(core.PluginUnavailableError, match=r"^strategy='hpu_parallel' is the Intel Gaudi"):
        core.resolve(plugins=["hpu_parallel"])  # the resolver's unknown-alias path for plugins=[...]


def test_a_typo_still_gets_the_unknown_alias_error() -> None:
    with pytest.raises(core.UnknownPluginError, match="Unknown accelerator 'ipuu'"):
        core.resolve(accelerator="ipuu")


def test_the_listing_shows_them_unavailable_without_importing_anything() -> None:
    catalog = discover()
    assert "hpu" not in catalog.aliases("accelerator")  # never selectable, never auto-detected
    assert all(info.alias != "ipu" for info in catalog.of_kind("accelerator"))
    code = (
        "import json, sys, runpy; sys.argv = ['core.plugins', '--json']\n"
        "try:\n    runpy.run_module('core.plugins', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('IMPORTED', json.dumps(sorted(m for m in sys.modules if m.startswith(('core_', 'torch')))))"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    body, _, imported = listed.stdout.rpartition("IMPORTED ")
    assert json.loads(imported) == []
    entries = {(entry["kind"], entry["alias"]): entry for entry in json.loads(body)}
    for key in GRAPHCORE | HABANA:
        entry = entries[key]
        assert entry["status"] == "unavailable", entry
        assert "not on the package index" in entry["reason"]
    assert entries[("accelerator", "ipu")]["distribution"] == "Graphcore Poplar SDK"
    assert entries[("strategy", "hpu_single")]["distribution"] == "Habana SynapseAI"
