"""A fit stopped in the middle of an epoch, saved with ``trainer.save_checkpoint`` and continued from that checkpoint,
trains each remaining sample of the epoch exactly once, on the same number of processes and on another, counted
by sample id (checkpoint_jobs/stopped_fit.py: stopped by ``max_steps`` and by a callback's ``should_stop``).

Before, the checkpoint recorded epoch 1, 0 batches done and no sample position: the continued fit began a new
epoch, and of a 64-sample epoch stopped after 6 of 8 steps on 2 processes, 13 samples were never trained and 13
twice.
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

SCRIPTS = Path(__file__).parent / "checkpoint_jobs"
sys.path.insert(0, str(SCRIPTS))

from stopped_fit import BATCH, SAMPLES, SCENARIOS, STOP  # noqa: E402

pytestmark = DDP_JOBS


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both phases, run once for the file: stop, save and continue on 2 processes, then continue on 1."""
    directory = tmp_path_factory.mktemp("stopped")
    environment = job_environment()
    for phase in ("two", "one"):
        job = subprocess.run([sys.executable, str(SCRIPTS / "stopped_fit.py"), str(directory), phase],
                             capture_output=True, text=True, timeout=180, env=environment)
        assert job.returncode == 0, f"phase {phase}:\n{job.stdout[-3000:]}\n{job.stderr[-6000:]}"
    return directory


def trained(out: Path, scenario: str, part: str, ranks: int, epoch: int = 0) -> list[int]:
    ids: list[int] = []
    for rank in range(ranks):
        ids += json.loads((out / scenario / f"{part}-{rank}.json").read_text()).get(str(epoch), [])
    return ids


@pytest.mark.timeout(400)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("devices", [2, 1])
def test_continuing_a_fit_stopped_mid_epoch_trains_each_remaining_sample_once(
    out: Path, scenario: str, devices: int
) -> None:
    before = trained(out, scenario, "stop", 2)
    after = trained(out, scenario, f"resume{devices}", devices)
    assert len(before) == STOP[scenario] * 2 * BATCH  # the stop came where the scenario puts it
    counts = Counter(before + after)
    never = sorted(set(range(SAMPLES)) - set(counts))
    twice = sorted(sample for sample, count in counts.items() if count > 1)
    assert (never, twice) == ([], []), f"{scenario} on {devices}: never trained {never}, trained twice {twice}"
    assert trained(out, scenario, f"resume{devices}", devices, epoch=1) == []  # epoch 0 continued, not a new one


@pytest.mark.timeout(400)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_checkpoint_saved_after_the_stop_records_the_epoch_and_its_position(out: Path, scenario: str) -> None:
    saved = torch.load(out / scenario / "stopped.ckpt", weights_only=True)
    loops, position = saved["loops"], saved["sample_position"]
    per_rank = STOP[scenario]
    assert (saved["epoch"], loops["epoch"], loops["batches_done"], loops["epoch_finished"]) == (0, 0, per_rank, False)
    assert (position["epoch"], position["done"], position["replicas"]) == (0, per_rank * 2 * BATCH, 2)
    # The epoch-interval scheduler did not step at the stop (Lightning's rule): the continued epoch steps it once.
    assert saved["lr_schedulers"][0]["last_epoch"] == 0
