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
from core.toolkit.strategies import ParallelStrategy


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


def test_a_strategy_without_ddp_or_copies_is_refused_by_name() -> None:
    with pytest.raises(core.ConfigurationError, match="strategy 'single_device' neither wraps modules") as error:
        core.Lite(accelerator="cpu", strategy="single_device", plugins=[DiLoCoExtension()])
    assert "'fsdp' or 'model_parallel'" in str(error.value)


def test_sharded_strategies_are_asked_for_copies_when_the_run_is_resolved() -> None:
    lite = core.Lite(accelerator="cpu", strategy="fsdp", devices=4, plugins=[DiLoCoExtension(replicas=2)])
    strategy = lite.active.strategy
    assert isinstance(strategy, ParallelStrategy)
    assert strategy.outer_replicas == 2  # before any process exists: sizes are checked per copy


def test_model_parallel_sizes_are_checked_against_one_groups_ranks() -> None:
    from core_model_parallel import ModelParallelStrategy

    # 2 groups of 2: tensor_parallel_size=2 fills a group (it would not fill the world of 4).
    fits = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2)
    core.Lite(accelerator="cpu", strategy=fits, devices=4, plugins=[DiLoCoExtension(replicas=2)])
    too_big = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=4)
    with pytest.raises(core.ConfigurationError, match=r"one of 2 copies side by side.*world size 2"):
        core.Lite(accelerator="cpu", strategy=too_big, devices=4, plugins=[DiLoCoExtension(replicas=2)])


def test_replicas_that_do_not_divide_the_processes_are_refused_before_they_start() -> None:
    with pytest.raises(core.ConfigurationError, match=r"replicas=3\) does not divide the 4 processes"):
        core.Lite(accelerator="cpu", strategy="fsdp", devices=4, plugins=[DiLoCoExtension(replicas=3)])


def test_a_strategy_without_copies_refuses_replicate_outside() -> None:
    ddp = core.Lite(accelerator="cpu", strategy="ddp", devices=2).active.strategy
    assert isinstance(ddp, ParallelStrategy)
    with pytest.raises(core.ConfigurationError, match=r"cannot run as independent copies.*fsdp.*model_parallel"):
        ddp.replicate_outside(2)
    fsdp = core.Lite(accelerator="cpu", strategy="fsdp", devices=4).active.strategy
    assert isinstance(fsdp, ParallelStrategy)
    with pytest.raises(core.ConfigurationError, match=r"replicate_outside\(3\): the copies must divide the world"):
        fsdp.replicate_outside(3)
    with pytest.raises(core.ConfigurationError, match="expected a positive number of copies"):
        fsdp.replicate_outside(0)


def test_listed_by_the_plugins_cli_without_importing_it() -> None:
    listing = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv=['core.plugins']; "
         "runpy.run_module('core.plugins', run_name='__main__')\n"
         "assert 'core_diloco' not in sys.modules and 'torch' not in sys.modules"],
        capture_output=True, text=True, timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"diloco\s+.*core-diloco", listing.stdout), listing.stdout
