"""What ``Module.log`` records, and how step and epoch values are made from it.

One :class:`MetricStore` per loop (training, and one for each evaluation run). A call to ``log`` costs a
few attribute reads and a list append: nothing is converted to a Python number and nothing crosses
processes per step, except a step value logged with ``sync_dist=True`` (reduced when logged, as asked).

Epoch values are weighted means (or sums, maxima, minima) over the batches of the epoch. For means the
store keeps each batch's value and weight and sums them in chunks of fixed size, in float64; with
``sync_dist=True`` the sums and the weights, not the means, are added across processes, so the result is
the mean over every sample of every process. Because the chunking depends only on how many values were
logged, a run resumed mid-epoch from :meth:`MetricStore.state_dict` computes bit for bit the same value.

A ``torchmetrics.Metric`` logged as the value accumulates by itself, as in Lightning: its step value is what the
latest ``metric(preds, target)`` call returned (this batch's value, not synchronised), its epoch value is
``metric.compute()`` (torchmetrics synchronises its states across processes then, whatever ``sync_dist`` says),
and it is reset when the epoch's values have been recorded. torchmetrics is never imported here: a value is a
Metric only if torchmetrics is already imported and the value is an instance.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable
from typing import Any, Final

import torch

from core._errors import ConfigurationError

REDUCE_FXS: Final = ("mean", "sum", "max", "min")


def reduction_name(name: str, reduce_fx: Any) -> str:
    """``reduce_fx`` as one of :data:`REDUCE_FXS`: Lightning also takes ``"avg"``, any case, and ``torch.mean``,
    ``torch.sum``, ``torch.max``/``max``, ``torch.min``/``min``."""
    by_function = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", max: "max", torch.min: "min", min: "min"}
    if isinstance(reduce_fx, str):
        chosen = {"avg": "mean"}.get(reduce_fx.lower(), reduce_fx.lower())
    else:
        chosen = next((word for function, word in by_function.items() if reduce_fx is function), "")
    if chosen not in REDUCE_FXS:
        raise ConfigurationError(
            f"self.log({name!r}, reduce_fx={reduce_fx!r}): only `self.log(..., reduce_fx={{min,max,mean,sum}})` are "
            f"supported (also 'avg', any case, and torch.mean / torch.sum / torch.max / torch.min). If you need a "
            f"custom reduction, log a `torchmetrics.Metric` instance instead."
        )
    return chosen

CHUNK: Final = 256
"""How many batch values are kept before they are folded into the running float64 sum."""

Reduce = Callable[[torch.Tensor, str], torch.Tensor]

# Where a log() call comes from decides its defaults, as in Lightning.
TRAIN_BATCH: Final = "train_batch"  # training_step and the training batch hooks: on_step, not on_epoch
EVAL_BATCH: Final = "eval_batch"  # validation / test steps and their batch hooks: on_epoch, weighted
EPOCH: Final = "epoch"  # epoch-level hooks: on_epoch, each call weighs 1

_DEFAULTS: Final = {TRAIN_BATCH: (True, False), EVAL_BATCH: (False, True), EPOCH: (False, True)}
_HOOKS: Final = {TRAIN_BATCH: "`training_step` (or a training batch hook)",
                 EVAL_BATCH: "`validation_step` / `test_step` (or an evaluation batch hook)",
                 EPOCH: "an epoch-level hook"}


def batch_size_of(batch: Any) -> int:
    """The length of the first tensor found in ``batch`` (depth first), 1 when there is none."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim > 0 else 1
    if isinstance(batch, dict):
        items: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return 1
    for item in items:
        if isinstance(item, (torch.Tensor, dict, list, tuple)):
            return batch_size_of(item)
    return 1


class _Entry:
    """One logged name: its options, its latest step value and its epoch accumulation."""

    __slots__ = (
        "chunk_values",
        "chunk_weights",
        "loaders",
        "logger",
        "metric",
        "metric_updated",
        "name",
        "on_epoch",
        "on_step",
        "partial",
        "prog_bar",
        "reduce_fx",
        "running",
        "section",
        "step_batch",
        "step_value",
        "suffix",
        "sync_dist",
        "weight",
    )

    def __init__(
        self, name: str, prog_bar: bool, logger: bool, on_step: bool, on_epoch: bool, reduce_fx: str, sync_dist: bool,
        suffix: str = "",
    ) -> None:
        self.name = name
        self.suffix = suffix  # "/dataloader_idx_N" with several evaluation loaders, after "_step" / "_epoch"
        self.section = TRAIN_BATCH  # where it was first logged from
        self.prog_bar = prog_bar
        self.logger = logger
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.reduce_fx = reduce_fx
        self.sync_dist = sync_dist
        self.step_value: torch.Tensor | float | None = None
        self.step_batch = -1
        self.metric: Any = None  # a torchmetrics.Metric logged under this name
        self.metric_updated = False
        self.loaders: set[int] = set()  # the evaluation loaders (of several) whose steps logged it
        self.reset_epoch()

    def reset_epoch(self) -> None:
        if self.metric is not None and self.metric_updated:
            self.metric.reset()
        self.metric_updated = False
        self.chunk_values: list[torch.Tensor | float] = []
        self.chunk_weights: list[float] = []
        self.partial = 0.0  # float64 sum of value * weight over folded chunks
        self.weight = 0.0
        self.running: torch.Tensor | None = None  # max / min so far

    @property
    def key(self) -> str:
        """The name with its loader suffix: ``loss/dataloader_idx_1``."""
        return self.name + self.suffix

    @property
    def step_key(self) -> str:
        """Lightning's key of the step value: ``loss_step/dataloader_idx_1`` when also on_epoch."""
        return f"{self.name}_step{self.suffix}" if self.on_epoch else self.key

    @property
    def epoch_key(self) -> str:
        """Lightning's key of the epoch value: ``loss_epoch/dataloader_idx_1`` when also on_step."""
        return f"{self.name}_epoch{self.suffix}" if self.on_step else self.key

    @property
    def has_epoch_value(self) -> bool:
        if self.metric is not None:
            return self.on_epoch and self.metric_updated
        return self.weight > 0 or bool(self.chunk_values) or self.running is not None

    def add(self, value: torch.Tensor | float, weight: float) -> None:
        if self.reduce_fx in ("max", "min"):
            tensor = torch.as_tensor(value, dtype=torch.float64).detach().cpu() if not isinstance(
                value, torch.Tensor) else value
            if self.running is None:
                self.running = tensor
            else:
                pick = torch.maximum if self.reduce_fx == "max" else torch.minimum
                self.running = pick(self.running, tensor.to(self.running.device, self.running.dtype))
            return
        self.chunk_values.append(value)
        self.chunk_weights.append(weight)
        if len(self.chunk_values) >= CHUNK:
            self.fold()

    def fold(self) -> None:
        """Add the kept values into the float64 running sum, in one fixed-order reduction."""
        if not self.chunk_values:
            return
        values = torch.stack([torch.as_tensor(value).detach().to("cpu", torch.float64) for value in self.chunk_values])
        weights = torch.tensor(self.chunk_weights, dtype=torch.float64)
        self.partial = float(self.partial + float((values.reshape(-1) * weights).sum()))
        self.weight += float(weights.sum())
        self.chunk_values, self.chunk_weights = [], []

    def local_sums(self) -> tuple[float, float]:
        """(sum of value x weight, sum of weights) over the epoch so far on this process."""
        self.fold()
        return self.partial, self.weight

    def state(self) -> dict[str, Any]:
        return {
            "options": [self.prog_bar, self.logger, self.on_step, self.on_epoch, self.reduce_fx, self.sync_dist],
            "chunk_values": [float(torch.as_tensor(value, dtype=torch.float64)) for value in self.chunk_values],
            "chunk_weights": list(self.chunk_weights),
            "partial": self.partial,
            "weight": self.weight,
            "running": None if self.running is None else self.running.detach().cpu(),
            "suffix": self.suffix,
        }


def _torchmetric(value: Any) -> Any:
    """``value`` if it is a ``torchmetrics.Metric`` (only possible once torchmetrics is imported), else ``None``."""
    torchmetrics = sys.modules.get("torchmetrics")
    if torchmetrics is not None and isinstance(value, torchmetrics.Metric):
        return value
    return None


def _as_value(name: str, value: Any) -> torch.Tensor | float:
    """``value`` as one number; Lightning's wording (``self.log(name, value)` was called, but ...``) on refusal."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ConfigurationError(
                f"`self.log({name}, {value})` was called, but the tensor must have a single element (a tensor of "
                f"shape {tuple(value.shape)}). You can try doing `self.log({name}, {value}.mean())`."
            )
        return value.detach()
    if isinstance(value, numbers.Number) and not isinstance(value, (bool, complex)):
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, dict) and any(isinstance(item, dict) for item in value.values()):
        raise ConfigurationError(
            f"`self.log({name}, {value})` was called, but nested dictionaries cannot be logged: log one number under "
            f"each name (self.log_dict for several)."
        )
    raise ConfigurationError(
        f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged: expected "
        f"a number, a one-element tensor or a torchmetrics.Metric (self.log_dict for several values)."
    )


class MetricStore:
    """The values logged during one loop.

    :param reduce: ``Lite.all_reduce`` shaped as ``reduce(tensor, op)``, or ``None`` in a single process
        (nothing to synchronise, so no collective is run).
    :param is_global_zero: Whether this process is global rank 0 (for ``rank_zero_only``).
    """

    def __init__(self, reduce: Reduce | None, is_global_zero: bool, device: torch.device) -> None:
        self._reduce = reduce
        self._is_global_zero = is_global_zero
        self._device = device
        self.entries: dict[str, _Entry] = {}
        self.batch_index = -1  # counts batches seen by this store; step values remember theirs
        self._batch: Any = None
        self._batch_size: int | None = None
        self._section = TRAIN_BATCH
        self._on_step_default, self._on_epoch_default = _DEFAULTS[TRAIN_BATCH]
        self._suffix = ""
        self._loader: int | None = None  # the evaluation loader (of several) whose step runs
        self.filler = False  # an evaluation batch that only keeps the processes in step: counts for nothing
        self._restored = False  # the state came from a checkpoint (load_state_dict)

    # -- what the loops call -------------------------------------------------------------------------

    def enter(self, section: str, dataloader_idx: int | None = None) -> None:
        """Set where the next log() calls come from, and the suffix for several evaluation loaders."""
        self._section = section
        self._on_step_default, self._on_epoch_default = _DEFAULTS[section]
        self._suffix = f"/dataloader_idx_{dataloader_idx}" if dataloader_idx is not None else ""
        self._loader = dataloader_idx

    def new_batch(self, batch: Any) -> None:
        self.batch_index += 1
        self._batch = batch
        self._batch_size = None

    # -- what Module.log calls -----------------------------------------------------------------------

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: str | Callable[..., Any],
        sync_dist: bool,
        rank_zero_only: bool,
        batch_size: int | None,
        add_dataloader_idx: bool,
    ) -> None:
        if rank_zero_only:
            if sync_dist:
                raise ConfigurationError(
                    f"self.log({name!r}, rank_zero_only=True, sync_dist=True): a value computed on rank 0 only "
                    f"cannot be reduced across processes; drop one of the two."
                )
            if not self._is_global_zero:
                return
        if add_dataloader_idx and "/dataloader_idx_" in name:
            raise ConfigurationError(
                f"You called `self.log` with the key `{name}` but it should not contain information about "
                f"`dataloader_idx` when `add_dataloader_idx=True`: core adds the suffix itself when there are several "
                f"evaluation loaders. Log it without the suffix, or pass add_dataloader_idx=False."
            )
        suffix = self._suffix if add_dataloader_idx else ""
        key = name + suffix
        entry = self.entries.get(key)
        if entry is None:
            entry = self._new_entry(name, suffix, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)
        elif entry.section == self._section:
            self._check_same_options(entry, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)
        if self._loader is not None:
            entry.loaders.add(self._loader)
        metric = _torchmetric(value)
        if metric is not None or entry.metric is not None:
            self._log_metric(entry, metric)
            return
        tensor_or_number = _as_value(name, value)
        if entry.on_step:
            if entry.sync_dist and self._reduce is not None:
                # reduced by its own reduce_fx, as Lightning does (a "sum" step value: the sum over processes)
                tensor_or_number = self._reduce(self._on_device(tensor_or_number), entry.reduce_fx)
            entry.step_value = tensor_or_number
            entry.step_batch = self.batch_index
        if entry.on_epoch and not self.filler:
            entry.add(tensor_or_number, 1.0 if entry.reduce_fx == "sum" else self._weight(batch_size))

    def _log_metric(self, entry: _Entry, metric: Any) -> None:
        """A torchmetrics.Metric: it keeps its own epoch state; the step value is its latest forward's result."""
        if entry.metric is None and (entry.chunk_values or entry.weight or entry.running is not None):
            raise ConfigurationError(
                f"self.log({entry.name!r}, <{type(metric).__name__}>) after numbers were logged under the same name "
                f"this epoch; log the Metric under its own name."
            )
        if metric is None or (entry.metric is not None and metric is not entry.metric):
            raise ConfigurationError(
                f"self.log({entry.name!r}, ...) logs {type(entry.metric).__name__} object {id(entry.metric):#x} under "
                f"this name; log that same object each time (one Metric per name, as in Lightning), not "
                f"{'a number' if metric is None else f'another Metric ({id(metric):#x})'}."
            )
        entry.metric = metric
        if self.filler:
            return
        entry.metric_updated = True
        if entry.on_step:
            value = getattr(metric, "_forward_cache", None)
            if value is None:
                raise ConfigurationError(
                    f"self.log({entry.name!r}, <{type(metric).__name__}>) with on_step=True, but the Metric has no "
                    f"value for this batch: only update() was called. Call it as metric(preds, target), which "
                    f"returns the batch's value, or log it with on_step=False (its epoch value is compute())."
                )
            entry.step_value = value.detach() if isinstance(value, torch.Tensor) else value
            entry.step_batch = self.batch_index

    def _check_same_options(
        self, entry: _Entry, prog_bar: bool, logger: bool, on_step: bool | None, on_epoch: bool | None,
        reduce_fx: str | Callable[..., Any], sync_dist: bool,
    ) -> None:
        """A name logged again from the same kind of hook keeps its options (Lightning refuses a change too)."""
        given = {
            "prog_bar": bool(prog_bar), "logger": bool(logger),
            "on_step": self._on_step_default if on_step is None else bool(on_step),
            "on_epoch": self._on_epoch_default if on_epoch is None else bool(on_epoch),
            "reduce_fx": reduction_name(entry.name, reduce_fx), "sync_dist": bool(sync_dist),
        }
        changed = [f"{option}={getattr(entry, option)!r} then {value!r}" for option, value in given.items()
                   if getattr(entry, option) != value]
        if changed:
            raise ConfigurationError(
                f"You called `self.log({entry.name}, ...)` twice in {_HOOKS[self._section]} with different "
                f"arguments ({', '.join(changed)}). This is not allowed: log a name with the same options each "
                f"time, or log the other value under another name."
            )

    def _new_entry(
        self, name: str, suffix: str, prog_bar: bool, logger: bool, on_step: bool | None, on_epoch: bool | None,
        reduce_fx: str | Callable[..., Any],
        sync_dist: bool,
    ) -> _Entry:
        reduce_fx = reduction_name(name, reduce_fx)
        step = self._on_step_default if on_step is None else bool(on_step)
        epoch = self._on_epoch_default if on_epoch is None else bool(on_epoch)
        if not step and not epoch:
            raise ConfigurationError(
                f"self.log({name!r}, on_step=False, on_epoch=False): `self.log(on_step=False, on_epoch=False)` is not "
                f"useful, it keeps nothing; set on_step=True (each step's value) or on_epoch=True (the epoch's)."
            )
        if step and self._section == EPOCH:
            raise ConfigurationError(
                f"self.log({name!r}, on_step=True) in an epoch-level hook: there is no step there; log with "
                f"on_epoch=True."
            )
        entry = self.entries[name + suffix] = _Entry(name, prog_bar, logger, step, epoch, reduce_fx, sync_dist, suffix)
        entry.section = self._section
        return entry

    def _weight(self, batch_size: int | None) -> float:
        if self._section == EPOCH:
            return 1.0
        if batch_size is not None:
            return float(batch_size)
        if self._batch_size is None:
            self._batch_size = batch_size_of(self._batch)
        return float(self._batch_size)

    def _on_device(self, value: torch.Tensor | float) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value
        return torch.tensor(value, device=self._device)

    # -- reading values back -------------------------------------------------------------------------

    def step_metrics(self, for_logger: bool, for_prog_bar: bool = False) -> dict[str, float]:
        """The step values logged during the latest batch (one ``.item()`` each: call at logging steps), only those
        logged with ``logger=True`` if ``for_logger``, with ``prog_bar=True`` if ``for_prog_bar``."""
        latest = self.batch_index
        return {
            entry.step_key: float(entry.step_value)
            for entry in self.entries.values()
            if entry.on_step and entry.step_batch == latest and entry.step_value is not None
            and (entry.logger or not for_logger) and (entry.prog_bar or not for_prog_bar)
        }

    def forked_names(self) -> dict[str, str]:
        """Each name logged with both ``on_step`` and ``on_epoch``, and the key of its epoch value (``name_epoch``).

        Lightning's ``callback_metrics`` also holds such a name bare: ``ModelCheckpoint(monitor=name)`` reads it.
        """
        return {entry.key: entry.epoch_key for entry in self.entries.values() if entry.on_step and entry.on_epoch}

    def loaders_of(self) -> dict[str, set[int]]:
        """The epoch key of each name logged in the steps of several evaluation loaders, and those loaders (a name
        logged with ``add_dataloader_idx=False`` belongs to the loaders that logged it, as in Lightning)."""
        return {entry.epoch_key: set(entry.loaders) for entry in self.entries.values() if entry.loaders}

    def latest_step_values(self, for_logger: bool = False) -> dict[str, torch.Tensor | float]:
        """The latest step value of every name (only those logged with ``logger=True`` if ``for_logger``),
        whichever batch logged it (no conversion)."""
        return {
            entry.step_key: entry.step_value
            for entry in self.entries.values()
            if entry.on_step and entry.step_value is not None and (entry.logger or not for_logger)
        }

    def compute_epoch(self) -> dict[str, float]:
        """The epoch value of every name logged with ``on_epoch``; collectives for ``sync_dist`` ones.

        Every process must call this at the same point with the same names logged (the reductions run
        in the order of the sorted names: one for sums and weights, one per max / min name).
        """
        results: dict[str, float] = {}
        entries = [self.entries[name] for name in sorted(self.entries) if self.entries[name].has_epoch_value]
        synced_sums = [entry for entry in entries if entry.reduce_fx in ("mean", "sum") and entry.metric is None]
        sums = torch.tensor([value for entry in synced_sums for value in entry.local_sums()], dtype=torch.float64)
        if self._reduce is not None:
            to_sync = [index for index, entry in enumerate(synced_sums) if entry.sync_dist]
            if to_sync:
                positions = [2 * index + offset for index in to_sync for offset in (0, 1)]
                reduced = self._reduce(sums[positions].to(self._device), "sum").cpu()
                sums[positions] = reduced.to(torch.float64)
        for index, entry in enumerate(synced_sums):
            total, weight = float(sums[2 * index]), float(sums[2 * index + 1])
            if entry.reduce_fx == "sum":
                results[entry.epoch_key] = total  # every value weighs 1
            else:
                results[entry.epoch_key] = total / weight if weight else float("nan")
        for entry in entries:
            if entry.metric is not None:  # in name order on every process: compute() may synchronise
                results[entry.epoch_key] = float(entry.metric.compute())
            elif entry.reduce_fx in ("max", "min") and entry.running is not None:
                running = entry.running
                if entry.sync_dist and self._reduce is not None:
                    running = self._reduce(running.to(self._device), entry.reduce_fx)
                results[entry.epoch_key] = float(running)
        return results

    def reset_epoch(self) -> None:
        """Start a new epoch's accumulation. Before the run's first batch it keeps what was logged (values logged in
        ``on_train_start`` belong to the first epoch, as in Lightning), unless the state came from a checkpoint."""
        if self.batch_index == -1 and not self._restored:
            return
        for entry in self.entries.values():
            entry.reset_epoch()

    def reset_metrics(self) -> None:
        """Reset the torchmetrics.Metric objects logged this epoch, once its values are recorded (Lightning's time)."""
        for entry in self.entries.values():
            if entry.metric is not None and entry.metric_updated:
                entry.metric.reset()
                entry.metric_updated = False

    def prog_bar_names(self) -> set[str]:
        names = set()
        for entry in self.entries.values():
            if entry.prog_bar:
                names.update({entry.step_key, entry.epoch_key})
        return names

    def logger_names(self) -> set[str]:
        names = set()
        for entry in self.entries.values():
            if entry.logger:
                names.update({entry.step_key, entry.epoch_key})
        return names

    # -- checkpoints ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The epoch accumulation so far (for a checkpoint taken in the middle of an epoch)."""
        return {name: entry.state() for name, entry in self.entries.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = True
        self.entries = {}
        for name, saved in state.items():
            prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist = saved["options"]
            suffix = saved.get("suffix", "")
            entry = _Entry(name[: len(name) - len(suffix)], prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist,
                           suffix)
            entry.chunk_values = [torch.tensor(value, dtype=torch.float64) for value in saved["chunk_values"]]
            entry.chunk_weights = list(saved["chunk_weights"])
            entry.partial = float(saved["partial"])
            entry.weight = float(saved["weight"])
            entry.running = saved["running"]
            self.entries[name] = entry
