"""The loop position in samples, so that a checkpoint resumes on any number of data-parallel ranks.

A ``DistributedSampler`` of any world size draws an epoch in the same order (a permutation of the dataset
seeded with ``seed + epoch``, or the dataset's own order without shuffling) and deals it out round-robin:
rank ``r`` of ``W`` reads positions ``r, r + W, r + 2W, ...``. Once every rank has read ``k`` samples, the
first ``k * W`` positions of the order are done, whatever ``W`` was. A checkpoint therefore records the
position as that global number of samples, with what draws the order (:class:`SamplePosition`).

Resuming on the same number of replicas skips the batches already trained on, as before (the resumed run
is the uninterrupted one, bitwise). On another number, :class:`RemainderSampler` deals the rest of the order
to the new ranks for that one epoch, under the ``DistributedSampler`` rules applied to the remainder: padded
with its first samples until every rank has as many (``drop_last=False``), or its tail dropped
(``drop_last=True``). docs/fault-tolerance.md states what that means for each sample.

The ``Trainer``'s fit loop and :class:`core.fault_tolerance.ResumableCheckpoints` both use this module.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any, Final

import attrs
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, Sampler, SequentialSampler

from core._errors import CoreWarning

FORMAT: Final = "core.samples/1"
"""The ``format`` entry of a saved :class:`SamplePosition`."""


@attrs.frozen
class EpochOrder:
    """The order in which an epoch reads a map-style dataset, the same for every world size.

    :param length: The dataset's length.
    :param shuffle: Whether the order is a permutation drawn from ``seed + epoch`` (else ``0 .. length - 1``).
    :param seed: The sampler's seed.
    :param epoch: The epoch (the sampler's ``set_epoch``).
    """

    length: int
    shuffle: bool
    seed: int
    epoch: int

    def indices(self) -> list[int]:
        """The order itself, drawn exactly as ``DistributedSampler.__iter__`` draws it."""
        if not self.shuffle:
            return list(range(self.length))
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        order: list[int] = torch.randperm(self.length, generator=generator).tolist()
        return order


@attrs.frozen
class SamplePosition:
    """How far an epoch got: the first ``done`` samples of ``order`` are trained on.

    :param order: The epoch's order.
    :param done: Samples of the order consumed, over every rank (at most its length).
    :param replicas: How many data-parallel ranks read the epoch when it was saved.
    :param start: Where those ranks began dealing the order (0, or the position a resized resume went on from):
        the same number of replicas skips batches only when the epoch was dealt from its start.
    """

    order: EpochOrder
    done: int
    replicas: int
    start: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain values, loadable with ``weights_only=True``."""
        return {"format": FORMAT, **attrs.asdict(self.order), "done": self.done, "replicas": self.replicas,
                "start": self.start}

    @classmethod
    def from_dict(cls, saved: object) -> SamplePosition | None:
        """The position :meth:`as_dict` saved; ``None`` for a checkpoint without one (older, or an unknown order)."""
        if not isinstance(saved, dict) or saved.get("format") != FORMAT:
            return None
        order = EpochOrder(int(saved["length"]), bool(saved["shuffle"]), int(saved["seed"]), int(saved["epoch"]))
        return cls(order, int(saved["done"]), int(saved["replicas"]), int(saved.get("start", 0)))


class RemainderSampler(Sampler[int]):
    """This rank's share of what an epoch has left: ``order`` from position ``start`` on, dealt round-robin.

    :param order: The epoch's order (as saved: the same permutation on every world size).
    :param start: Samples of the order already trained on.
    :param num_replicas: How many data-parallel ranks share the remainder now.
    :param rank: This rank's index among them.
    :param drop_last: Drop the remainder's tail to a multiple of ``num_replicas``; otherwise pad it with its
        first samples (``DistributedSampler``'s rules, applied to the remainder).
    """

    def __init__(self, order: EpochOrder, start: int, num_replicas: int, rank: int, drop_last: bool) -> None:
        self.order = order
        self.start = min(start, order.length)
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        remaining = order.length - self.start
        self.num_samples = remaining // num_replicas if drop_last else math.ceil(remaining / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        remaining = self.order.indices()[self.start :]
        if self.total_size > len(remaining) and remaining:
            repeats = math.ceil((self.total_size - len(remaining)) / len(remaining))
            remaining += (remaining * repeats)[: self.total_size - len(remaining)]
        return iter(remaining[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples


@attrs.frozen
class EpochSamples:
    """One iteration of a training loader, read once when it starts: turns this rank's batches into a position.

    :param order: The epoch's order.
    :param start: Samples of the order done before this iteration (a resized resume), else 0.
    :param replicas: How many data-parallel ranks deal the order.
    :param batch_size: The loader's batch size.
    :param share: This rank's samples in the iteration (the sampler's length).
    :param first_batch: The loop's count of batches done in the epoch when this iteration started.
    """

    order: EpochOrder
    start: int
    replicas: int
    batch_size: int
    share: int
    first_batch: int = 0

    def position(self, batches_done: int) -> SamplePosition:
        """The position after ``batches_done`` batches of the epoch (the loop's count) on every rank."""
        read = min(max(0, batches_done - self.first_batch) * self.batch_size, self.share)
        done = min(self.order.length, self.start + self.replicas * read)
        return SamplePosition(self.order, done, self.replicas, self.start)


def _data_loader(loader: object) -> DataLoader[Any] | None:
    inner = getattr(loader, "loader", loader)  # a Lite-set-up loader wraps its DataLoader
    return inner if isinstance(inner, DataLoader) else None


def _batched_sampler(loader: DataLoader[Any]) -> Sampler[Any] | None:
    """The sampler a plain ``BatchSampler`` batches, ``None`` when batching is custom or off."""
    if type(loader.batch_sampler) is not BatchSampler or loader.batch_size is None:
        return None
    sampler: Sampler[Any] = loader.batch_sampler.sampler  # type: ignore[assignment]
    return sampler


def _draws_like_distributed(sampler: object) -> bool:
    return isinstance(sampler, DistributedSampler) and type(sampler).__iter__ is DistributedSampler.__iter__


def _reads_each_sample_once(sampler: object) -> bool:
    """A one-process sampler of the whole dataset, each sample once per epoch (the ones DataLoader makes)."""
    if type(sampler) is RandomSampler:
        return not sampler.replacement and sampler.num_samples == len(sampler.data_source)
    return type(sampler) is SequentialSampler


def epoch_samples(loader: object, epoch: int, first_batch: int = 0) -> EpochSamples | None:
    """What one iteration of ``loader`` in epoch ``epoch`` reads, or ``None`` when its order is not known.

    Known: a ``DataLoader`` batching with a plain ``BatchSampler`` over a ``DistributedSampler`` (Lite's, or
    your own), a ``SequentialSampler`` (one process, no shuffling) or a :class:`RemainderSampler`. A
    ``RandomSampler`` draws from the global generator: no other world size can draw its order again.
    """
    data_loader = _data_loader(loader)
    sampler = None if data_loader is None else _batched_sampler(data_loader)
    if data_loader is None or sampler is None:
        return None
    batch_size = int(data_loader.batch_size)  # type: ignore[arg-type]  # checked by _batched_sampler
    if isinstance(sampler, RemainderSampler):
        return EpochSamples(sampler.order, sampler.start, sampler.num_replicas, batch_size, len(sampler), first_batch)
    if _draws_like_distributed(sampler):
        distributed: DistributedSampler[Any] = sampler  # type: ignore[assignment]
        order = EpochOrder(len(distributed.dataset), distributed.shuffle, distributed.seed, epoch)  # type: ignore[arg-type]
        return EpochSamples(order, 0, distributed.num_replicas, batch_size, len(distributed), first_batch)
    if type(sampler) is SequentialSampler:
        length = len(sampler)
        return EpochSamples(EpochOrder(length, False, 0, epoch), 0, 1, batch_size, length, first_batch)
    return None


def _remainder_for(data_loader: DataLoader[Any], saved: SamplePosition) -> RemainderSampler | str:
    """The sampler that finishes ``saved``'s epoch on this loader's ranks, or why there is none."""
    sampler = _batched_sampler(data_loader)
    if sampler is None:
        return "the training DataLoader batches with a custom batch_sampler (or batch_size=None)"
    if _draws_like_distributed(sampler):
        distributed: DistributedSampler[Any] = sampler  # type: ignore[assignment]
        replicas, rank, drop_last = distributed.num_replicas, distributed.rank, distributed.drop_last
    elif _reads_each_sample_once(sampler):
        replicas, rank, drop_last = 1, 0, False  # one process reads everything; the DataLoader drops its last batch
    else:
        return f"the training DataLoader's sampler is a custom {type(sampler).__qualname__}"
    length = len(data_loader.dataset)  # type: ignore[arg-type]
    if length != saved.order.length:
        return f"the dataset has {length} samples now, {saved.order.length} when the checkpoint was saved"
    return RemainderSampler(saved.order, saved.done, replicas, rank, drop_last)


def resized_remainder(
    loader: object, saved: SamplePosition | None, saved_world_size: int, world_size: int, batches_done: int
) -> RemainderSampler | None:
    """How a resumed epoch goes on: ``None`` to skip ``batches_done`` batches, or the sampler of the remainder.

    Skipping batches is exact when the epoch was dealt from its start to as many data-parallel ranks as now
    (bitwise, as before). Otherwise the saved position's remainder is dealt to the ranks there are now. A
    checkpoint without a position (older, or an order no other world size can draw) saved on another world
    size still skips batches, with a :class:`~core.CoreWarning` saying that samples are missed or repeated.
    """
    data_loader = _data_loader(loader)
    if saved is not None and data_loader is not None:
        remainder = _remainder_for(data_loader, saved)
        if isinstance(remainder, RemainderSampler):
            if remainder.num_replicas == saved.replicas and saved.start == 0:
                return None
            return remainder
        reason = remainder
    else:
        reason = ("the checkpoint records the loop position in batches only (it predates sample positions, or its "
                  "training sampler's order cannot be drawn again: a RandomSampler of one process)")
    if saved_world_size != world_size:
        warnings.warn(
            f"core: resuming a checkpoint saved on {saved_world_size} process(es) on {world_size}: {reason}, so the "
            f"resumed epoch skips {batches_done} batch(es) of this world's order and some of its samples are "
            f"trained twice or not at all. The next epochs are whole. For an exact resume on another world size, "
            f"train with a DataLoader that Lite splits (or your own DistributedSampler) and save a new checkpoint.",
            CoreWarning,
            stacklevel=3,
        )
    return None


@contextlib.contextmanager
def sampler_swapped(loader: object, sampler: RemainderSampler | None) -> Iterator[None]:
    """Batch ``loader`` from ``sampler`` inside the block (one resumed epoch); ``None`` changes nothing.

    The ``BatchSampler`` reads its sampler when an iteration starts, so the block must hold that iteration.
    """
    data_loader = _data_loader(loader)
    if sampler is None or data_loader is None:
        yield
        return
    batch_sampler: BatchSampler = data_loader.batch_sampler  # type: ignore[assignment]
    original = batch_sampler.sampler
    batch_sampler.sampler = sampler
    try:
        yield
    finally:
        batch_sampler.sampler = original
