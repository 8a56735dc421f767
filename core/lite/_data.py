"""Rebuilding a user's DataLoader around a ``DistributedSampler`` when the strategy splits the data."""

from __future__ import annotations

import inspect
from typing import Any, Final

from torch.utils.data import (
    BatchSampler,
    DataLoader,
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
    if type(loader) is not DataLoader:
        raise ConfigurationError(
            f"setup_dataloaders cannot add a distributed sampler to a {type(loader).__qualname__}: only a plain "
            f"torch.utils.data.DataLoader can be rebuilt without knowing its constructor; {_WAY_OUT}."
        )
    if loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        raise ConfigurationError(
            f"setup_dataloaders cannot split a DataLoader whose batch_sampler is a custom "
            f"{type(loader.batch_sampler).__qualname__}; {_WAY_OUT}."
        )
    if not isinstance(loader.sampler, (SequentialSampler, RandomSampler)):
        raise ConfigurationError(
            f"setup_dataloaders cannot split a DataLoader with the custom sampler "
            f"{type(loader.sampler).__qualname__} (only the default sequential or shuffle=True sampling "
            f"can be replaced); {_WAY_OUT}."
        )


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
    sampler: DistributedSampler[Any] = DistributedSampler(loader.dataset, **settings)
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        **_copied_arguments(loader),
    )
