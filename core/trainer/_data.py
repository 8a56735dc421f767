"""The DataLoaders of a Trainer run: where they come from, how they are split, how many batches are used.

Training loaders go through ``Lite.setup_dataloaders`` as they are: the strategy's ``DistributedSampler``
pads the dataset so that every process gets as many samples, which training needs (every process must
take the same number of steps).

Evaluation loaders must not count a sample twice. When Lite gave one a ``DistributedSampler``, the Trainer
replaces it by a :class:`ShardSampler`: process ``r`` of ``W`` reads samples ``r, r + W, r + 2W, ...``, no
padding. The processes then hold at most one sample more or less than each other, which can leave one
process a batch short; that process runs one *filler* batch (a copy of its first sample), so that every
process calls the model (and any collective inside it) equally often, and the filler's logged values and
predictions are discarded. Epoch metrics are therefore exact over the dataset.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import attrs
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Sampler, SequentialSampler

from core._errors import ConfigurationError, CoreWarning

if TYPE_CHECKING:
    from core.lite import Lite
    from core.module import DataModule, Module

# DataLoader arguments that describe the sampling; every other argument is copied when rebuilding.
_SAMPLING: Final = frozenset({"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})


class ShardSampler(Sampler[int]):
    """This process's share of an evaluation dataset, without padding.

    :param length: The dataset's length.
    :param num_replicas: How many processes share it.
    :param rank: This process's index among them.
    :param batch_size: The loader's batch size, to add one filler sample when this process would run one
        batch fewer than the process with the most samples.
    """

    def __init__(self, length: int, num_replicas: int, rank: int, batch_size: int) -> None:
        self.indices = list(range(rank, length, num_replicas))
        most = math.ceil(length / num_replicas)
        self.real_batches = math.ceil(len(self.indices) / batch_size)
        if self.real_batches < math.ceil(most / batch_size):
            self.indices.append(self.indices[0] if self.indices else 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


@attrs.frozen
class PreparedLoader:
    """A set-up DataLoader, the batches to use from it, and how many of them are real (not fillers)."""

    loader: DataLoader[Any]
    batches: float  # a whole number, or inf for a loader without a length
    real_batches: float


def copied_arguments(loader: DataLoader[Any]) -> dict[str, Any]:
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {name: getattr(loader, name) for name in parameters if name not in _SAMPLING and hasattr(loader, name)}


def _length(loader: DataLoader[Any]) -> float:
    try:
        return float(len(loader))
    except TypeError:  # an IterableDataset without __len__
        return math.inf


def limited(limit: int | float, length: float, flag: str) -> float:
    """How many batches a ``limit_*_batches`` value allows out of ``length``."""
    if isinstance(limit, float):
        if limit == 1.0:
            return length
        if math.isinf(length):
            raise ConfigurationError(
                f"{flag}={limit} is a fraction, but the DataLoader has no length (an IterableDataset); pass a "
                f"number of batches instead."
            )
        return float(int(length * limit))
    return min(float(limit), length)


def check_limit(value: object, flag: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{flag}={value!r}: expected a number of batches (int) or a fraction (float in 0..1).")
    if isinstance(value, float) and not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{flag}={value!r}: a fraction must lie in 0.0..1.0 (or pass an int of batches).")
    if isinstance(value, int) and value < 0:
        raise ConfigurationError(f"{flag}={value!r}: expected 0 or more batches.")
    return value


def as_loader_list(found: Any, where: str) -> list[DataLoader[Any]]:
    if found is None:
        return []
    loaders = list(found) if isinstance(found, (list, tuple)) else [found]
    for loader in loaders:
        if not isinstance(loader, DataLoader):
            raise ConfigurationError(f"{where} gave {loader!r}; expected a torch.utils.data.DataLoader (or a list).")
    return loaders


def find_loaders(
    kind: str, method: str, given: Any, datamodule: DataModule | None, module: Module
) -> list[DataLoader[Any]]:
    """The loaders of ``kind`` ("train", "val", ...): the given ones, else those of the DataModule's ``method``
    (``"train_dataloader"``, ...), else the Module's."""
    if given is not None:
        return as_loader_list(given, f"the {kind} dataloaders argument")
    if datamodule is not None:
        found = getattr(datamodule, method)()
        if found is not None:
            return as_loader_list(found, f"{type(datamodule).__qualname__}.{method}()")
    hook = getattr(module, method, None)
    if not callable(hook):  # set to None on the object (``model.val_dataloader = None``): none, as in Lightning
        return []
    return as_loader_list(hook(), f"{type(module).__qualname__}.{method}()")


def sequential(loader: DataLoader[Any], prefix: str) -> DataLoader[Any]:
    """``overfit_batches``: the same first batches every epoch, so a loader whose sampler is not sequential (a
    shuffling one, or a sampler of your own) is rebuilt with a ``SequentialSampler``, as Lightning does.

    :param prefix: ``"train"`` or ``"val"``, for the warning.
    """
    if isinstance(loader.sampler, SequentialSampler) or type(loader) is not DataLoader or loader.batch_size is None:
        return loader
    warnings.warn(
        f"Trainer(overfit_batches=...): you requested to overfit but enabled {prefix} dataloader shuffling (its "
        f"sampler, {type(loader.sampler).__name__}, is not sequential): its shuffling is turned off, so each epoch "
        f"reads the same first batches.", CoreWarning, stacklevel=2,
    )
    return DataLoader(loader.dataset, batch_size=loader.batch_size, shuffle=False, drop_last=loader.drop_last,
                      **copied_arguments(loader))


def prepare_train_loader(
    lite: Lite, loader: DataLoader[Any], limit: int | float, overfit: bool = False, use_distributed_sampler: bool = True
) -> PreparedLoader:
    """Set up the training loader; ``overfit`` (``overfit_batches`` > 0) turns its shuffling off."""
    if overfit:
        loader = sequential(loader, "train")
    prepared = lite.setup_dataloaders(
        loader, use_distributed_sampler=use_distributed_sampler, move_to_device=False
    ).loader
    batches = limited(limit, _length(prepared), "limit_train_batches")
    return PreparedLoader(prepared, batches, batches)


def prepare_eval_loader(
    lite: Lite, loader: DataLoader[Any], limit: int | float, flag: str, use_distributed_sampler: bool = True
) -> PreparedLoader:
    """Set up an evaluation loader; where the strategy splits data, split it without padding."""
    prepared = lite.setup_dataloaders(
        loader, use_distributed_sampler=use_distributed_sampler, move_to_device=False
    ).loader
    sampler = prepared.sampler
    real = math.inf
    shardable = (
        isinstance(sampler, DistributedSampler)
        and type(loader) is DataLoader
        and not isinstance(loader.dataset, IterableDataset)
        and loader.batch_size is not None
        and not loader.drop_last
        and not isinstance(loader.sampler, DistributedSampler)  # the user's own split stays
    )
    if shardable:
        distributed = cast("DistributedSampler[Any]", sampler)
        length = len(loader.dataset)  # type: ignore[arg-type]  # a map-style dataset has a length
        shard = ShardSampler(length, distributed.num_replicas, distributed.rank, cast(int, loader.batch_size))
        rebuilt = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=shard, **copied_arguments(loader))
        prepared = lite.setup_dataloaders(rebuilt, use_distributed_sampler=False, move_to_device=False).loader
        real = shard.real_batches
    batches = limited(limit, _length(prepared), flag)
    return PreparedLoader(prepared, batches, min(real, batches))


def epoch_setters(loader: DataLoader[Any]) -> Sequence[Any]:
    """``set_epoch`` of the loader's sampler and batch sampler's sampler, where they have one."""
    setters: list[Any] = []
    for sampler in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
        set_epoch = getattr(sampler, "set_epoch", None)
        if callable(set_epoch) and set_epoch not in setters:
            setters.append(set_epoch)
    return setters


_TRANSFER_HOOKS: Final = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def overrides(obj: object, name: str) -> bool:
    """Whether ``obj`` replaces the :class:`core.Module` / :class:`core.DataModule` method ``name``: its class
    does, or the object itself holds one. A hook set to ``None`` on the object (``model.validation_step = None``)
    counts as not defined, as in Lightning."""
    from core.module import DataModule, Module

    if name in getattr(obj, "__dict__", {}):
        return obj.__dict__[name] is not None
    base = Module if isinstance(obj, Module) else DataModule
    return getattr(type(obj), name, None) is not getattr(base, name, None)


def batch_transfer(lite: Any, module: Module, datamodule: DataModule | None) -> Any:
    """``transfer(batch, dataloader_idx)``: the batch through the transfer hooks to the device.

    Each of the three hooks is the DataModule's when its class overrides it, else the Module's (Lightning's
    rule). With none overridden it is ``lite.to_device`` alone, so the common case costs nothing extra.
    """
    chosen = [getattr(datamodule, name) if datamodule is not None and overrides(datamodule, name)
              else getattr(module, name) for name in _TRANSFER_HOOKS]
    custom = [overrides(module, name) or (datamodule is not None and overrides(datamodule, name))
              for name in _TRANSFER_HOOKS]
    to_device = lite.to_device
    if not any(custom):
        return lambda batch, dataloader_idx: to_device(batch)
    before, transfer, after = chosen
    device = lite.device

    def through_hooks(batch: Any, dataloader_idx: int) -> Any:
        batch = before(batch, dataloader_idx)
        batch = transfer(batch, device, dataloader_idx)
        return after(batch, dataloader_idx)

    return through_hooks
