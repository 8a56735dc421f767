"""The DDP family as the resolver sees it: one alias per start method, options checked on construction,
compatibility declared as data (``dp`` needs CUDA), and interactive sessions limited to fork."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
import torch
from core_ddp import DataParallelStrategy, DDPStrategy

import core

ALIASES = {
    "ddp": ("popen", False),
    "ddp_spawn": ("spawn", False),
    "ddp_fork": ("fork", False),
    "ddp_notebook": ("fork", False),
    "ddp_find_unused_parameters_true": ("popen", True),
}


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_each_alias_resolves_to_a_ddp_strategy_of_its_start_method(alias: str) -> None:
    active = core.resolve(accelerator="cpu", strategy=alias, devices=2)
    strategy = active.strategy
    assert isinstance(strategy, DDPStrategy)
    assert (strategy.start_method, strategy.find_unused_parameters) == ALIASES[alias]
    assert strategy.name == alias
    assert active.config.strategy == alias
    assert active.config.distributions["strategy"] == "core-ddp"
    assert active.config.world_size == 2


def test_an_object_with_options_works_as_well_as_the_alias() -> None:
    strategy = DDPStrategy(static_graph=True, bucket_cap_mb=10, timeout=12.5, start_method="spawn")
    active = core.resolve(accelerator="cpu", strategy=strategy, devices=3)
    assert active.strategy is strategy
    assert active.config.strategy == "ddp_spawn"
    assert strategy.timeout == timedelta(seconds=12.5)
    assert strategy.static_graph and strategy.bucket_cap_mb == 10


def test_the_defaults_follow_lightning() -> None:
    strategy = DDPStrategy()
    assert strategy.timeout == timedelta(minutes=30)
    assert (strategy.find_unused_parameters, strategy.static_graph, strategy.gradient_as_bucket_view) == (
        False, False, False)
    assert (strategy.bucket_cap_mb, strategy.process_group_backend, strategy.sync_batchnorm) == (None, None, False)
    assert strategy.max_processes is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start_method": "thread"}, "DDPStrategy(start_method='thread') is not a start method; expected one of "
                                     "['popen', 'spawn', 'fork', 'forkserver']."),
        ({"timeout": 0}, "DDPStrategy(timeout=0) must be a positive duration"),
        ({"bucket_cap_mb": -1}, "DDPStrategy(bucket_cap_mb=-1) must be positive or None."),
    ],
)
def test_bad_options_are_refused_with_the_value_and_the_choices(options: dict[str, object], message: str) -> None:
    with pytest.raises(core.ConfigurationError) as caught:
        DDPStrategy(**options)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_dp_on_the_cpu_explains_that_it_needs_cuda_and_what_to_use_instead() -> None:
    with pytest.raises(core.ConfigurationError) as caught:
        core.resolve(accelerator="cpu", strategy="dp", devices=2)
    message = str(caught.value)
    assert "The strategy 'dp' (core-ddp) does not support the accelerator 'cpu'" in message
    assert "only accelerator ['cuda']" in message
    assert "On the CPU use strategy='ddp' with devices=N" in message
    assert isinstance(core.resolve(accelerator="cpu", strategy="ddp", devices=1).strategy, DDPStrategy)
    assert DataParallelStrategy.process_per_device is False


def test_ddp_on_a_tpu_points_to_the_xla_strategy() -> None:
    assert not DDPStrategy.supports.allows("accelerator", "tpu")
    assert "strategy='xla'" in DDPStrategy.supports.hint


def test_a_collective_before_the_process_group_exists_is_a_clear_error() -> None:
    active = core.resolve(accelerator="cpu", strategy="ddp", devices=2)
    with pytest.raises(core.ConfigurationError, match="runs a collective before its process group exists"):
        active.hook.strategy_reduce(tensor=torch.ones(1), group=None, reduce_op="sum")


def test_no_backward_sync_needs_the_wrapped_module() -> None:
    active = core.resolve(accelerator="cpu", strategy="ddp", devices=2)
    with pytest.raises(core.ConfigurationError, match="Linear is not wrapped in DistributedDataParallel"):
        active.hook.strategy_block_backward_sync(module=torch.nn.Linear(1, 1))


INTERACTIVE = """
import core

def work(lite):
    return lite.all_reduce(lite.global_rank + 1, reduce_op="sum").item()

try:
    print("RESULT", core.Lite(accelerator="cpu", strategy="{strategy}", devices=2).launch(work))
except core.ConfigurationError as error:
    print("REFUSED", error)

"""


@pytest.mark.distributed
@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_notebook"])
def test_only_fork_strategies_start_processes_from_an_interactive_session(strategy: str) -> None:
    session = subprocess.run(
        [sys.executable, "-i", "-q"], input=textwrap.dedent(INTERACTIVE.replace("{strategy}", strategy)),
        capture_output=True, text=True, timeout=50, env={**_clean_environment(), "OMP_NUM_THREADS": "1"},
    )
    if strategy == "ddp_notebook":
        assert "RESULT 3" in session.stdout, session.stdout + session.stderr
        return
    assert f"REFUSED strategy={strategy!r} cannot start processes from an interactive session" in session.stdout
    assert "Use strategy='ddp_notebook' (fork) here, or run the code as a script" in session.stdout


def _clean_environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items()
            if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR", "NODE_RANK"}}
