"""Rebuilding a user's DataLoader around a ``DistributedSampler`` when the strategy splits the data.

A custom sampler with a length (``SubsetRandomSampler``, a weighted one, your own) is kept and split as Lightning
Fabric splits it: each epoch the sampler's indices are drawn once and every process takes its share of them,
in the order the sampler gave them (:class:`DistributedSamplerWrapper`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Sized
from typing import Any, Final

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from core._errors import ConfigurationError
from core.lite._seed import global_seed

# Arguments that describe the sampling; every other DataLoader argument is copied from the loader.
_SAMPLING: Final = frozenset({"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})

_WAY_OUT: Final = (
    "pass use_distributed_sampler=False and give the DataLoader a sampler that splits the data across "
    "processes yourself (for example torch.utils.data.DistributedSampler)"
)


def _copied_arguments(loader: DataLoader[Any]) -> dict[str, Any]:
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {name: getattr(loader, name) for name in parameters if name not in _SAMPLING and hasattr(loader, name)}


def _check_rebuildable(loader: DataLoader[Any]) -> None:
    # A subclass keeping DataLoader's constructor (it adds methods, as a loader with state_dict does) is rebuilt
    # as itself, as Lightning rebuilds it; one with its own constructor cannot be rebuilt without knowing it.
    if type(loader).__init__ is not DataLoader.__init__:
        raise ConfigurationError(
            f"setup_dataloaders cannot add a distributed sampler to a {type(loader).__qualname__}: only a "
            f"torch.utils.data.DataLoader, or a subclass keeping its constructor, can be rebuilt without knowing "
            f"the constructor; {_WAY_OUT}."
        )
    if loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        raise ConfigurationError(
            f"setup_dataloaders cannot split a DataLoader whose batch_sampler is a custom "
            f"{type(loader.batch_sampler).__qualname__}; {_WAY_OUT}."
        )
    if not isinstance(loader.sampler, (SequentialSampler, RandomSampler, Sized)):
        raise ConfigurationError(
            f"setup_dataloaders cannot split a DataLoader with the custom sampler "
            f"{type(loader.sampler).__qualname__}, which has no length (a custom sampler is split by position in "
            f"what it yields each epoch, so it needs __len__); {_WAY_OUT}."
        )


class _SamplerIndices(Dataset[int]):
    """The indices a sampler yields in one epoch, as a dataset a ``DistributedSampler`` can split by position."""

    def __init__(self, sampler: Iterable[Any]) -> None:
        self.sampler = sampler
        self._drawn: list[Any] | None = None

    def draw(self) -> None:
        self._drawn = list(self.sampler)

    def __getitem__(self, position: int) -> Any:
        if self._drawn is None:
            self.draw()
        assert self._drawn is not None
        return self._drawn[position]

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class DistributedSamplerWrapper(DistributedSampler[Any]):
    """A custom sampler split across processes: each epoch its indices are drawn once (the same on every process
    when the sampler is seeded alike, as Lite's global seed does) and this process takes every ``num_replicas``-th
    of them, starting at its rank. ``shuffle`` reorders those positions; it is off unless asked for."""

    def __init__(self, sampler: Iterable[Any], **settings: Any) -> None:
        super().__init__(_SamplerIndices(sampler), **settings)

    def __iter__(self) -> Iterator[Any]:
        indices: _SamplerIndices = self.dataset  # type: ignore[assignment]
        indices.draw()
        return (indices[position] for position in super().__iter__())


def with_distributed_sampler(loader: DataLoader[Any], sampler_kwargs: dict[str, Any]) -> DataLoader[Any]:
    """A DataLoader like ``loader`` that reads only this process's share of the dataset.

    ``shuffle`` is kept (a ``RandomSampler`` becomes a shuffling ``DistributedSampler`` seeded with the
    global seed), as are ``drop_last``, the batch size and every other argument. Iterable datasets and
    loaders that already use a ``DistributedSampler`` are returned unchanged.
    """
    if isinstance(loader.dataset, IterableDataset) or isinstance(loader.sampler, DistributedSampler):
        return loader
    _check_rebuildable(loader)
    settings = {
        "shuffle": isinstance(loader.sampler, RandomSampler),
        "drop_last": loader.drop_last,
        "seed": global_seed(),
        **sampler_kwargs,
    }
    sampler: DistributedSampler[Any]
    if isinstance(loader.sampler, (SequentialSampler, RandomSampler)):
        sampler = DistributedSampler(loader.dataset, **settings)
    else:  # a custom sampler, kept: each process reads its share of what it yields
        sampler = DistributedSamplerWrapper(loader.sampler, **settings)
    return type(loader)(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        **_copied_arguments(loader),
    )
