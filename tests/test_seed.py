"""`seed_everything`: two runs with the same seed draw the same numbers everywhere, DataLoader workers
included, while workers and ranks within a run draw different ones."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import core
from core.lite._seed import reset_seed, worker_init_function


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    yield


class RandomAugmentations(Dataset[torch.Tensor]):
    """Each item draws from torch, random and numpy, as augmentations do."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        worker = -1 if info is None else info.id
        return torch.tensor([index, worker, torch.rand(()).item(), random.random(), float(numpy.random.rand())])


def draws_through_lite(seed: int, workers: bool) -> torch.Tensor:
    def epoch(lite: core.Lite) -> torch.Tensor:
        lite.seed_everything(seed, workers=workers, verbose=False)
        loader = lite.setup_dataloaders(DataLoader(RandomAugmentations(), batch_size=2, shuffle=True, num_workers=2))
        return torch.cat(list(loader))

    result = core.Lite(accelerator="cpu", devices=1).launch(epoch)
    assert result is not None  # one process: rank 0's result
    return result


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [True, False])
def test_two_runs_with_the_same_seed_are_identical_including_two_dataloader_workers(workers: bool) -> None:
    first = draws_through_lite(42, workers)
    second = draws_through_lite(42, workers)
    other = draws_through_lite(43, workers)

    assert set(first[:, 1].tolist()) == {0.0, 1.0}  # both workers produced items
    assert torch.equal(first, second)
    assert not torch.equal(first[:, 2:], other[:, 2:])


@pytest.mark.timeout(120)
def test_workers_of_one_run_draw_different_numbers() -> None:
    draws = draws_through_lite(42, workers=True)
    by_worker = {worker: draws[draws[:, 1] == worker][:, 2:] for worker in (0.0, 1.0)}
    assert not torch.equal(by_worker[0.0], by_worker[1.0])


def test_lite_attaches_the_worker_seeding_function_only_when_asked() -> None:
    def init_fns(lite: core.Lite) -> list[Any]:
        loaders = [DataLoader(RandomAugmentations(), num_workers=2), DataLoader(RandomAugmentations())]
        own = DataLoader(RandomAugmentations(), num_workers=2, worker_init_fn=print)
        return [loader.worker_init_fn for loader in lite.setup_dataloaders(*loaders, own)]

    core.seed_everything(1, workers=True, verbose=False)
    found = core.Lite(accelerator="cpu", devices=1).launch(init_fns)
    assert found is not None
    seeded, no_workers, own = found
    assert seeded.func is worker_init_function and seeded.keywords == {"rank": 0}
    assert no_workers is None and own is print
    core.seed_everything(1, workers=False, verbose=False)
    unseeded = core.Lite(accelerator="cpu", devices=1).launch(init_fns)
    assert unseeded is not None and unseeded[0] is None


def worker_draws(worker_id: int, rank: int) -> tuple[float, float, float]:
    torch.manual_seed(1000 + worker_id)  # what PyTorch does in a worker: base seed + worker id
    worker_init_function(worker_id, rank=rank)
    return torch.rand(()).item(), random.random(), float(numpy.random.rand())


def test_the_worker_seed_depends_on_the_worker_and_the_rank_and_nothing_else() -> None:
    assert worker_draws(0, rank=0) == worker_draws(0, rank=0)
    assert worker_draws(0, rank=0) != worker_draws(0, rank=1)
    assert worker_draws(0, rank=0) != worker_draws(1, rank=0)
    assert len(set(worker_draws(0, rank=0))) == 3  # torch, random and numpy are seeded independently


def test_seed_everything_seeds_every_generator_and_exports_the_seed() -> None:
    assert core.seed_everything(7, verbose=False) == 7
    first = (torch.rand(()).item(), random.random(), float(numpy.random.rand()))
    core.seed_everything(7, verbose=False)
    assert (torch.rand(()).item(), random.random(), float(numpy.random.rand())) == first
    assert os.environ["CORE_GLOBAL_SEED"] == "7" and os.environ["CORE_SEED_WORKERS"] == "0"


def test_without_a_seed_the_environment_decides_or_zero_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(core.CoreWarning, match="got no seed and CORE_GLOBAL_SEED is unset; seeding with 0"):
        assert core.seed_everything(verbose=False) == 0
    monkeypatch.setenv("CORE_GLOBAL_SEED", "99")
    assert core.seed_everything(verbose=False) == 99
    monkeypatch.setenv("CORE_GLOBAL_SEED", "ninety")
    with pytest.raises(core.ConfigurationError, match="CORE_GLOBAL_SEED='ninety' is not a whole number"):
        core.seed_everything()


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "3", True])
def test_invalid_seeds_are_refused_with_the_range(seed: object) -> None:
    with pytest.raises(core.ConfigurationError, match=rf"Invalid seed seed={seed!r}: expected a whole number in 0\.\."):
        core.seed_everything(seed)  # type: ignore[arg-type]


def test_reset_seed_repeats_the_parents_seed_in_a_new_process() -> None:
    core.seed_everything(11, verbose=False)
    expected = torch.rand(2)
    torch.manual_seed(0)
    reset_seed()
    assert torch.equal(torch.rand(2), expected)


def test_verbose_logs_the_seed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="core"):
        core.seed_everything(3)
    assert "Seed set to 3" in caplog.text
