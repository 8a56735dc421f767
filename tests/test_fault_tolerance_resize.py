"""Resuming on another world size trains each remaining sample of the epoch once, counted by sample id.

Three jobs (2 processes, 1, 2: see checkpoint_jobs/resize_samples.py) serve every test here: Lite's
``ResumableCheckpoints`` and the Trainer's ``FaultTolerance``, stopped in the middle of epoch 0 on 2 processes
and resumed on 1, and the other way round, with ``drop_last`` off and on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import DDP_JOBS, job_environment
from torch.utils.data import DistributedSampler

SCRIPTS = Path(__file__).parent / "checkpoint_jobs"
sys.path.insert(0, str(SCRIPTS))

from resize_samples import BATCH, SAMPLES, SEED, STOP_AFTER, Ids, name  # noqa: E402

pytestmark = DDP_JOBS

SCENARIOS = [(api, worlds, drop_last) for api in ("lite", "trainer") for worlds in ((2, 1), (1, 2))
             for drop_last in (False, True)]


def scenario_id(api: str, worlds: tuple[int, int], drop_last: bool) -> str:
    return f"{api}-{worlds[0]}to{worlds[1]}-drop_last={drop_last}"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The three phases, run once for the whole file: the output directory and every job's stderr."""
    out = tmp_path_factory.mktemp("resize")
    environment = job_environment()
    errors = []
    for phase in ("first", "middle", "last"):
        job = subprocess.run([sys.executable, str(SCRIPTS / "resize_samples.py"), str(out), phase],
                             capture_output=True, text=True, timeout=120, env=environment)
        assert job.returncode == 0, f"phase {phase}:\n{job.stdout[-3000:]}\n{job.stderr[-6000:]}"
        errors.append(job.stderr)
    return out, "\n".join(errors)


def trained(out: Path, api: str, worlds: tuple[int, int], drop_last: bool, half: str, epoch: int) -> list[int]:
    """Every id the ranks of one half trained on in ``epoch``, all ranks together."""
    directory = out / name(api, f"{worlds[0]}to{worlds[1]}", drop_last)
    world = worlds[0] if half == "before" else worlds[1]
    ids: list[int] = []
    for rank in range(world):
        ids += json.loads((directory / f"{half}-{rank}.json").read_text())[str(epoch)]
    return ids


def order(epoch: int) -> list[int]:
    """The epoch's order, as a DistributedSampler of any world size draws it."""
    generator = torch.Generator().manual_seed(SEED + epoch)
    permutation: list[int] = torch.randperm(SAMPLES, generator=generator).tolist()
    return permutation


def whole_epoch(world: int, drop_last: bool, epoch: int) -> Counter[int]:
    """What an uninterrupted epoch on ``world`` processes trains: DistributedSampler's share, batched."""
    counts: Counter[int] = Counter()
    for rank in range(world):
        sampler: DistributedSampler[int] = DistributedSampler(Ids(), world, rank, seed=SEED, drop_last=drop_last)
        sampler.set_epoch(epoch)
        share = list(sampler)
        counts.update(share[: len(share) // BATCH * BATCH] if drop_last else share)
    return counts


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("api", "worlds", "drop_last"), SCENARIOS, ids=[scenario_id(*case) for case in SCENARIOS])
def test_the_resumed_epoch_trains_every_remaining_sample_of_the_same_order_once(
    jobs: tuple[Path, str], api: str, worlds: tuple[int, int], drop_last: bool
) -> None:
    out, _ = jobs
    before_world, after_world = worlds
    done = STOP_AFTER[before_world] * BATCH * before_world  # the checkpoint's position: samples over every rank
    epoch = order(0)
    before = trained(out, api, worlds, drop_last, "before", 0)
    assert Counter(before) == Counter(epoch[:done]), "the first run trains a prefix of the epoch's order"
    both = Counter(before + trained(out, api, worlds, drop_last, "after", 0))
    remaining = SAMPLES - done
    if drop_last:
        # The remainder is dealt to the new ranks, its tail dropped to whole batches on every rank: a prefix of the
        # order, each sample once, and fewer than one global batch of the new world left out at its end.
        kept = remaining // (after_world * BATCH) * after_world * BATCH
        assert both == Counter(epoch[: done + kept])
        assert SAMPLES - (done + kept) < after_world * BATCH
    else:
        # Every sample once; the remainder is padded with its own first samples to a multiple of the new world size.
        padding = -remaining % after_world
        assert both == Counter(epoch) + Counter(epoch[done : done + padding])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("api", "worlds", "drop_last"), SCENARIOS, ids=[scenario_id(*case) for case in SCENARIOS])
def test_the_epoch_after_the_resumed_one_is_a_whole_epoch_of_the_new_world(
    jobs: tuple[Path, str], api: str, worlds: tuple[int, int], drop_last: bool
) -> None:
    out, _ = jobs
    assert Counter(trained(out, api, worlds, drop_last, "after", 1)) == whole_epoch(worlds[1], drop_last, 1)


def test_a_resize_with_a_recorded_position_warns_about_nothing(jobs: tuple[Path, str]) -> None:
    _, errors = jobs
    assert "core: resuming a checkpoint saved on" not in errors
