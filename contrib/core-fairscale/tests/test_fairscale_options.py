"""``DDPShardedStrategy``'s options (Lightning's names), its errors, and the one warning that FairScale is
unmaintained. No processes are started here (tests/test_fairscale_training.py trains)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from core_fairscale import UNMAINTAINED, DDPShardedStrategy, DDPSpawnShardedStrategy

import core


@pytest.mark.filterwarnings("ignore:FairScale has been unmaintained")  # its own test is below
def test_the_aliases_resolve_to_the_two_start_methods() -> None:
    for alias, start_method in (("ddp_sharded", "popen"), ("ddp_sharded_spawn", "spawn")):
        strategy = core.resolve(accelerator="cpu", strategy=alias, devices=2).plugins["strategy"]
        assert isinstance(strategy, DDPShardedStrategy)
        assert (strategy.name, strategy.start_method) == (alias, start_method)
    assert DDPSpawnShardedStrategy(reduce_buffer_size=0).start_method == "spawn"


def test_options_survive_the_trip_to_a_spawned_rank() -> None:
    strategy = DDPShardedStrategy(reduce_buffer_size=1024, broadcast_buffers=False, start_method="spawn")
    copy = pickle.loads(pickle.dumps(strategy))
    assert (copy.reduce_buffer_size, copy.broadcast_buffers, copy.sharded_optimizers) == (1024, False, ())


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"reduce_buffer_size": -1}, "reduce_buffer_size=-1): expected a whole number of elements >= 0"),
        ({"reduce_buffer_size": 1.5}, "reduce_buffer_size=1.5): expected a whole number"),
        ({"reduce_fp16": True, "reduce_buffer_size": 8}, "FairScale reduces in float16 only without buckets"),
        ({"broadcast_buffers": "yes"}, "DDPShardedStrategy(broadcast_buffers='yes'): expected True or False"),
        ({"start_method": "thread"}, "start_method='thread') is not a start method"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, object], expected: str) -> None:
    with pytest.raises(core.ConfigurationError) as raised:
        DDPShardedStrategy(**options)  # type: ignore[arg-type]
    assert expected in str(raised.value)


def test_tpu_and_the_distributed_checkpoint_io_are_refused_with_the_way_out() -> None:
    with pytest.raises(core.ConfigurationError, match="rank 0 writes the whole checkpoint as one file"):
        core.resolve(accelerator="cpu", strategy="ddp_sharded", devices=2, plugins=["distributed"])


def test_using_it_warns_once_per_process_that_fairscale_is_unmaintained() -> None:
    code = (
        "import warnings, core\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        core.resolve(accelerator='cpu', strategy='ddp_sharded', devices=2)\n"
        "mine = [w for w in caught if 'FairScale' in str(w.message)]\n"
        "print(len(mine), mine[0].category.__name__, issubclass(mine[0].category, core.CoreWarning))\n"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert finished.stdout.split() == ["1", "CoreWarning", "True"]
    assert "unmaintained since 2022" in UNMAINTAINED and "strategy='fsdp'" in UNMAINTAINED
