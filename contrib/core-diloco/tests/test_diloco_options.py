"""The extension's options, its schedule and its fragments, in one process (no process group needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import attrs
import pytest
import torch
from core_diloco import DiLoCoExtension, DiLoCoOptions, split_fragments

import core


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sync_every": 0}, "sync_every=0) must be a whole number >= 1"),
        ({"sync_every": True}, "sync_every=True) must be a whole number >= 1"),
        ({"fragments": 5, "sync_every": 4}, "fragments can be at most sync_every"),
        ({"compression": "fp8"}, "compression='fp8') is not one of 'none', 'bf16', 'int8'"),
        ({"outer_optimizer": "adam"}, "outer_optimizer='adam') is not one of 'nesterov', 'sgd' or a callable"),
        ({"outer_lr": -1.0}, "outer_lr=-1.0) must be a number >= 0"),
        ({"replicas": 0}, "replicas=0"),
    ],
)
def test_bad_options_are_configuration_errors_naming_the_value(options: dict[str, object], message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=re.escape(message)):
        DiLoCoExtension(**options)  # type: ignore[arg-type]


def test_defaults_are_the_papers() -> None:
    options = DiLoCoExtension().options
    assert (options.sync_every, options.outer_optimizer, options.outer_lr, options.outer_momentum) == (
        500, "nesterov", 0.7, 0.9)
    assert not options.overlaps and options.compression == "none"
    assert attrs.evolve(options, fragments=4).overlaps  # streaming overlaps by default
    assert not attrs.evolve(options, fragments=4, overlap=False).overlaps


def test_every_fragment_is_synchronised_once_per_h_steps_evenly_staggered() -> None:
    options = DiLoCoOptions(sync_every=8, fragments=4)
    schedule = {step: options.due(step) for step in range(1, 17) if options.due(step) is not None}
    assert schedule == {2: 0, 4: 1, 6: 2, 8: 3, 10: 0, 12: 1, 14: 2, 16: 3}
    plain = DiLoCoOptions(sync_every=3)
    assert [step for step in range(1, 10) if plain.due(step) is not None] == [3, 6, 9]


def test_fragments_are_contiguous_and_about_equal() -> None:
    parameters = [torch.empty(size) for size in (100, 10, 100, 10, 100, 10, 100, 10)]
    fragments = split_fragments(parameters, 2)
    assert fragments == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sorted(index for fragment in split_fragments(parameters, 3) for index in fragment) == list(range(8))


def test_a_strategy_without_ddp_is_refused_by_name() -> None:
    with pytest.raises(core.ConfigurationError, match="strategy 'single_device' does not wrap modules"):
        core.Lite(accelerator="cpu", strategy="single_device", plugins=[DiLoCoExtension()])


def test_listed_by_the_plugins_cli_without_importing_it() -> None:
    listing = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv=['core.plugins']; "
         "runpy.run_module('core.plugins', run_name='__main__')\n"
         "assert 'core_diloco' not in sys.modules and 'torch' not in sys.modules"],
        capture_output=True, text=True, timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"diloco\s+.*core-diloco", listing.stdout), listing.stdout
