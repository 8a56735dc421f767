"""``lightning.fabric.utilities.data``'s public helpers: questions about a DataLoader, and a worker count.

``has_len``, ``sized_len``, ``has_iterable_dataset`` and ``suggested_max_num_workers`` behave as Lightning's (same
arguments, results and warnings); importing this module does not import torch.
"""

from __future__ import annotations

import os
import warnings

from core._errors import ConfigurationError, CoreWarning

__all__ = ["has_iterable_dataset", "has_len", "sized_len", "suggested_max_num_workers"]


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether ``dataloader`` reads a ``torch.utils.data.IterableDataset`` (an object without ``dataset``: no)."""
    from torch.utils.data import IterableDataset

    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def sized_len(dataloader: object) -> int | None:
    """``len(dataloader)``, or ``None`` when it has no length (``TypeError`` or ``NotImplementedError``)."""
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_len(dataloader: object) -> bool:
    """Whether ``dataloader`` has a length.

    A length of 0 warns (``CoreWarning``: "returned 0 length"), as does a length on a loader over an
    ``IterableDataset``, which may be wrong when several workers each read the whole dataset.
    """
    length = sized_len(dataloader)
    if length == 0:
        warnings.warn(
            f"`{type(dataloader).__name__}` returned 0 length. Please make sure this was your intention: a loop over "
            "it runs no step.",
            CoreWarning,
            stacklevel=2,
        )
    if length is not None and has_iterable_dataset(dataloader):
        warnings.warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
            "num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to avoid "
            "having duplicate data.",
            CoreWarning,
            stacklevel=2,
        )
    return length is not None


def _cpus_available() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for a DataLoader's ``num_workers``: this process's share of the CPUs, less one for itself.

    :param local_world_size: How many processes of the run share this machine (the devices per node).
    :return: ``max(1, cpus // local_world_size - 1)``, which never makes torch warn about too many workers.
    """
    if local_world_size < 1:
        raise ConfigurationError(
            f"`local_world_size` should be >= 1, got {local_world_size}: pass the number of processes on this "
            "machine (the devices per node)."
        )
    return max(1, _cpus_available() // local_world_size - 1)
