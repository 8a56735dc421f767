"""`Lite.setup_dataloaders`: the distributed sampler the strategy asks for, the settings it keeps, the epoch
it sets on every new iteration, and batches moved to the device."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, TensorDataset

import core
from core import hookimpl
from core.builtin.accelerators import CPUAccelerator
from core.builtin.strategies import SingleDeviceStrategy
from core.lite import LiteDataLoader


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)


class SplittingStrategy(SingleDeviceStrategy):
    """One process that pretends to be ``rank`` of ``replicas``, to see the loader Lite builds."""

    def __init__(self, rank: int = 0, replicas: int = 2) -> None:
        super().__init__()
        self.rank = rank
        self.replicas = replicas

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.replicas, "rank": self.rank}


class MetaAccelerator(CPUAccelerator):
    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Any) -> torch.device:
        return torch.device("meta")


def dataset(size: int = 10) -> TensorDataset:
    return TensorDataset(torch.arange(size, dtype=torch.float32), torch.arange(size))


def collate_pairs(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {"x": torch.stack([x for x, _ in batch]), "y": torch.stack([y for _, y in batch])}


def launch(function: Any, **settings: Any) -> Any:
    return core.Lite(**{"accelerator": "cpu", "devices": 1, **settings}).launch(function)


def indices(loader: Any) -> list[int]:
    return [int(value) for batch in loader for value in batch["y"]]


def test_single_device_keeps_the_loader_and_its_sampler() -> None:
    original = DataLoader(dataset(), batch_size=4, shuffle=True, collate_fn=collate_pairs)

    def check(lite: core.Lite) -> None:
        loader = lite.setup_dataloaders(original)
        assert isinstance(loader, LiteDataLoader) and loader.loader is original
        assert len(loader) == 3 and loader.batch_size == 4  # attributes are the loader's
        assert sorted(indices(loader)) == list(range(10))

    launch(check)


def test_the_strategy_sampler_arguments_make_a_distributed_sampler_that_keeps_every_setting() -> None:
    generator = torch.Generator()
    original = DataLoader(
        dataset(), batch_size=2, shuffle=True, collate_fn=collate_pairs, drop_last=True, generator=generator,
        pin_memory=False, timeout=5.0,
    )

    def check(lite: core.Lite) -> None:
        loader = lite.setup_dataloaders(original)
        rebuilt = loader.loader
        sampler = rebuilt.sampler
        assert isinstance(sampler, DistributedSampler)
        assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.drop_last) == (2, 1, True, True)
        assert rebuilt.batch_size == 2 and rebuilt.drop_last and rebuilt.collate_fn is collate_pairs
        assert rebuilt.generator is generator and rebuilt.timeout == 5.0

    launch(check, strategy=SplittingStrategy(rank=1))


def test_each_rank_reads_its_share_and_every_epoch_is_shuffled_anew() -> None:
    def shares(lite: core.Lite) -> list[list[int]]:
        loader = lite.setup_dataloaders(DataLoader(dataset(12), batch_size=3, shuffle=True, collate_fn=collate_pairs))
        return [indices(loader) for _ in range(3)]

    rank0 = launch(shares, strategy=SplittingStrategy(rank=0))
    rank1 = launch(shares, strategy=SplittingStrategy(rank=1))
    for epoch in range(3):
        assert len(rank0[epoch]) == len(rank1[epoch]) == 6
        assert sorted(rank0[epoch] + rank1[epoch]) == list(range(12))
    assert rank0[0] != rank0[1] != rank0[2]  # set_epoch was called on every new iteration


def test_a_sequential_loader_stays_in_order_on_each_rank() -> None:
    def share(lite: core.Lite) -> list[int]:
        return indices(lite.setup_dataloaders(DataLoader(dataset(8), batch_size=2, collate_fn=collate_pairs)))

    assert launch(share, strategy=SplittingStrategy(rank=0)) == [0, 2, 4, 6]
    assert launch(share, strategy=SplittingStrategy(rank=1)) == [1, 3, 5, 7]


def test_the_distributed_sampler_shuffles_with_the_global_seed() -> None:
    def order(lite: core.Lite) -> list[int]:
        return indices(lite.setup_dataloaders(DataLoader(dataset(16), batch_size=4, shuffle=True,
                                                         collate_fn=collate_pairs)))

    core.seed_everything(1, verbose=False)
    first = launch(order, strategy=SplittingStrategy())
    core.seed_everything(2, verbose=False)
    second = launch(order, strategy=SplittingStrategy())
    core.seed_everything(1, verbose=False)
    assert launch(order, strategy=SplittingStrategy()) == first != second


def test_use_distributed_sampler_false_keeps_the_sampler() -> None:
    def check(lite: core.Lite) -> None:
        loader = lite.setup_dataloaders(DataLoader(dataset(), shuffle=True), use_distributed_sampler=False)
        assert isinstance(loader.loader.sampler, RandomSampler)

    launch(check, strategy=SplittingStrategy())


class Endless(IterableDataset[torch.Tensor]):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(4))


def test_iterable_datasets_are_left_to_the_user() -> None:
    def check(lite: core.Lite) -> list[int]:
        return [int(value) for value in lite.setup_dataloaders(DataLoader(Endless(), batch_size=None))]

    assert launch(check, strategy=SplittingStrategy()) == [0, 1, 2, 3]


class EveryOther(torch.utils.data.Sampler[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(0, 10, 2))

    def __len__(self) -> int:
        return 5


class Unsized(torch.utils.data.Sampler[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(0, 10, 2))


def test_a_custom_sampler_is_kept_and_each_rank_reads_its_share_of_what_it_yields() -> None:
    # As Lightning Fabric's DistributedSamplerWrapper: the sampler's indices, every num_replicas-th from the rank.
    def check(lite: core.Lite) -> list[int]:
        loader = lite.setup_dataloaders(DataLoader(dataset(), sampler=EveryOther(), batch_size=1))
        return [int(batch[1]) for batch in loader]

    assert launch(check, strategy=SplittingStrategy(rank=0)) == [0, 4, 8]
    assert launch(check, strategy=SplittingStrategy(rank=1)) == [2, 6, 0]  # padded to equal shares, as torch's


def test_a_subset_random_sampler_is_split_without_overlap_and_redrawn_each_epoch() -> None:
    def check(lite: core.Lite) -> list[list[int]]:
        generator = torch.Generator().manual_seed(3)  # the same draw on both ranks, as a seeded program's
        sampler = torch.utils.data.SubsetRandomSampler(list(range(2, 10)), generator=generator)
        loader = lite.setup_dataloaders(DataLoader(dataset(), sampler=sampler, batch_size=1))
        return [[int(batch[1]) for batch in loader] for _ in range(2)]

    first, second = launch(check, strategy=SplittingStrategy(rank=0)), launch(check, strategy=SplittingStrategy(rank=1))
    for epoch in range(2):
        assert sorted(first[epoch] + second[epoch]) == list(range(2, 10))  # every index of the subset, once
    assert first[0] != first[1]  # the sampler draws again each epoch


def test_unsized_samplers_and_subclasses_cannot_be_split_and_say_what_to_do() -> None:
    class MyLoader(DataLoader[Any]):
        def __init__(self, data: Any) -> None:  # a constructor of its own: cannot be rebuilt without knowing it
            super().__init__(data, batch_size=1)

    class StatefulLoader(DataLoader[Any]):  # DataLoader's constructor kept: rebuilt as itself, as Lightning does
        def state_dict(self) -> dict[str, Any]:
            return {}

    def check(lite: core.Lite) -> None:
        rebuilt = lite.setup_dataloaders(StatefulLoader(dataset()))
        assert type(rebuilt.loader) is StatefulLoader and isinstance(rebuilt.loader.sampler, DistributedSampler)
        with pytest.raises(core.ConfigurationError) as error:
            lite.setup_dataloaders(DataLoader(dataset(), sampler=Unsized()))
        assert "custom sampler Unsized, which has no length" in str(error.value)
        assert "use_distributed_sampler=False" in str(error.value)
        with pytest.raises(core.ConfigurationError, match=r"cannot add a distributed sampler to a .*MyLoader"):
            lite.setup_dataloaders(MyLoader(dataset()))
        with pytest.raises(core.ConfigurationError, match=r"takes torch.utils.data.DataLoader objects, got list"):
            lite.setup_dataloaders([1, 2])  # type: ignore[call-overload]
        loader = lite.setup_dataloaders(DataLoader(dataset()), use_distributed_sampler=False)
        with pytest.raises(core.CoreError, match=r"already set up by Lite.setup_dataloaders"):
            lite.setup_dataloaders(loader)  # type: ignore[call-overload]

    launch(check, strategy=SplittingStrategy())


def test_batches_are_moved_to_the_device_unless_asked_not_to() -> None:
    def check(lite: core.Lite) -> tuple[bool, bool]:
        moved, kept = lite.setup_dataloaders(
            DataLoader(dataset(4), batch_size=2, collate_fn=collate_pairs),
            DataLoader(dataset(4), batch_size=2, collate_fn=collate_pairs),
        )
        kept = lite.setup_dataloaders(DataLoader(dataset(4), batch_size=2), move_to_device=False)
        return all(batch["x"].is_meta for batch in moved), any(x.is_meta for x, _ in kept)

    assert launch(check, accelerator=MetaAccelerator()) == (True, False)


def test_several_loaders_come_back_as_a_list() -> None:
    def check(lite: core.Lite) -> None:
        loaders = lite.setup_dataloaders(DataLoader(dataset()), DataLoader(dataset()))
        assert isinstance(loaders, list) and len(loaders) == 2

    launch(check)
