"""Lightning 1.x's strategy names that still mean something: ``ddp_cpu`` (core-ddp) and ``tpu_spawn`` (core-tpu).

Both resolve to today's strategies and are listed by ``python -m core.plugins`` with a note, read from
core/registry/first_party.json ("legacy"), that they are legacy names; the listing imports no plugin for it.
Not covered: a run on a TPU (``tpu_spawn`` is the ``xla`` strategy object, whose own tests cover torch_xla).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import core
from core.registry._discovery import discover, legacy_note, load

pytest.importorskip("core_ddp")
pytest.importorskip("core_tpu")


def test_ddp_cpu_is_ddp_spawn_on_cpu_processes() -> None:
    active = core.resolve(accelerator="cpu", strategy="ddp_cpu", devices=2)
    strategy = active.plugins["strategy"]
    assert active.config.strategy == "ddp_cpu"  # its own rules (cpu only), not ddp_spawn's
    assert active.config.world_size == 2
    assert type(strategy).__name__ == "DDPCPUStrategy" and getattr(strategy, "start_method", None) == "spawn"


def test_ddp_cpu_with_another_accelerator_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the hardware queries are replaced: two CUDA devices, so that accelerator="cuda" itself resolves.
    pytest.importorskip("core_cuda")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(core.ConfigurationError) as raised:
        core.resolve(accelerator="cuda", strategy="ddp_cpu", devices=2)
    message = str(raised.value)
    assert "The strategy 'ddp_cpu' (core-ddp)" in message
    assert "accelerator 'cuda'" in message and "only accelerator ['cpu']" in message
    assert "Lightning 1.x's name for ddp_spawn on CPU processes" in message
    assert "strategy='ddp_spawn' (or 'ddp') with that accelerator" in message


def test_tpu_spawn_is_the_xla_strategy() -> None:
    info = discover().lookup("strategy", "tpu_spawn")
    assert info.distribution == "core-tpu"
    strategy = load(info)
    assert type(strategy).__name__ == "XLAStrategy" and core.traits_of(strategy, "strategy", "tpu_spawn").name == "xla"
    with pytest.raises(core.ConfigurationError, match=r"The strategy 'xla' \(given as 'tpu_spawn'\).*only accelerator"):
        core.resolve(accelerator="cpu", strategy="tpu_spawn")


def test_the_listing_notes_both_as_legacy_names_without_importing_them() -> None:
    assert legacy_note("strategy", "ddp_cpu") == "legacy name (Lightning 1.x): ddp_spawn on CPU processes, " \
        "accelerator='cpu' only"
    assert legacy_note("strategy", "ddp") is None
    code = (
        "import json, sys, runpy; sys.argv = ['core.plugins', '--json']\n"
        "try:\n    runpy.run_module('core.plugins', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('IMPORTED', json.dumps(sorted(m for m in sys.modules if m.startswith(('core_', 'torch')))))"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    body, _, imported = listed.stdout.rpartition("IMPORTED ")
    assert json.loads(imported) == [], f"listing imported {imported}"
    entries = {(entry["kind"], entry["alias"]): entry for entry in json.loads(body)}
    for alias, provider, meaning in (("ddp_cpu", "core-ddp", "ddp_spawn on CPU"), ("tpu_spawn", "core-tpu", "'xla'")):
        entry = entries[("strategy", alias)]
        assert entry["distribution"] == provider and entry["status"] == "ok"
        assert entry["reason"].startswith("legacy name (Lightning 1.x)") and meaning in entry["reason"]
