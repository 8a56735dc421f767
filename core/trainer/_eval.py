"""The evaluation loops: validation (inside fit, and ``Trainer.validate``), test and predict.

Each run of a loop records into a fresh :class:`MetricStore`; its epoch values become
``trainer.callback_metrics`` and go to the loggers at the trainer's logger step, its step values after each batch
under the count of that loader's batches, as in Lightning (neither for the sanity check).
The model runs in eval mode under ``torch.inference_mode`` (or ``no_grad``), through the set-up module,
and every module's train / eval mode is put back afterwards.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch

from core._errors import CoreWarning
from core.trainer._data import PreparedLoader, batch_transfer, copied_arguments, overrides
from core.trainer._logging import EPOCH, EVAL_BATCH, MetricStore
from core.trainer._signatures import check_dataloader_idx, takes_batch_idx
from core.trainer._stages import PREDICT, TEST, VALIDATION, EvalLoop

if TYPE_CHECKING:
    from core.trainer._view import LoopView as Trainer  # the protocol: the Trainer's class imports this module

def batches(prepared: PreparedLoader, limit: float) -> Iterator[tuple[int, Any]]:
    """``(index, batch)`` pairs of the loader, at most ``limit`` of them, without fetching one more."""
    if limit <= 0:
        return
    for index, batch in enumerate(prepared.loader):
        yield index, batch
        if index + 1 >= limit:
            return


@contextlib.contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Eval mode for the whole module, then each submodule's own mode back (frozen parts stay frozen)."""
    modes = [(submodule, submodule.training) for submodule in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training


@contextlib.contextmanager
def model_mode(module: Any, step_module: torch.nn.Module, loop: EvalLoop) -> Iterator[None]:
    """Eval mode for ``loop``: the Module's ``on_<loop>_model_eval`` / ``_train`` when it overrides them
    (Lightning calls them only then), else :func:`eval_mode`."""
    eval_hook, train_hook = loop.model_eval, loop.model_train
    custom_eval = overrides(module, eval_hook)
    custom_train = train_hook is not None and overrides(module, train_hook)
    if not custom_eval and not custom_train:
        with eval_mode(step_module):
            yield
        return
    modes = [(submodule, submodule.training) for submodule in step_module.modules()]
    if custom_eval:
        getattr(module, eval_hook)()
    else:
        step_module.eval()
    try:
        yield
    finally:
        if custom_train and train_hook is not None:
            getattr(module, train_hook)()
        else:
            for submodule, training in modes:
                submodule.training = training


def _no_grad(trainer: Trainer) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if trainer.config.inference_mode else torch.no_grad()


def new_store(trainer: Trainer) -> MetricStore:
    lite = trainer.lite
    reduce = (lambda tensor, op: lite.all_reduce(tensor, reduce_op=op)) if lite.world_size > 1 else None
    return MetricStore(reduce, lite.is_global_zero, lite.device)


def _run_batches(
    trainer: Trainer, loop: EvalLoop, loaders: Sequence[PreparedLoader], store: MetricStore,
    max_batches: float | None, outputs: list[list[Any]] | None,
) -> None:
    """Every batch of every loader through the loop's step and its hooks; fillers' outputs are dropped."""
    module, hooks = trainer.module, trainer.run_state.hooks
    assert module is not None
    transfer = batch_transfer(trainer.lite, module, trainer.datamodule)
    step_module = trainer.run_state.step_module
    start_hooks, end_hooks = hooks[loop.batch_start], hooks[loop.batch_end]
    module_start, module_end = getattr(module, loop.batch_start), getattr(module, loop.batch_end)
    several = len(loaders) > 1
    step = getattr(module, loop.step)
    check_dataloader_idx(module, loop.step, several, loop.data)
    with_index = takes_batch_idx(step)  # Lightning's rule, read once per loop: ``validation_step(self, batch)``
    profiler = trainer.active_profiler
    if profiler is not None:  # Lightning's action names
        step_module = profiler.wrap(f"[Strategy]{type(trainer.lite.strategy).__name__}.{loop.step}", step_module)
    warned_none = False
    for loader_index, prepared in enumerate(loaders):
        store.enter(EVAL_BATCH, loader_index if several else None)
        extra = (loader_index,) if several else ()
        limit = prepared.batches if max_batches is None else min(prepared.batches, max_batches)
        kept: list[Any] = []
        recorder = trainer.run_state.predict_recorders[loader_index] if loop is PREDICT else None
        numbered = batches(prepared, limit)
        if profiler is not None:
            numbered = profiler.wrap_iterator(loop.profiled_next, numbered)
        for batch_index, raw_batch in numbered:
            store.new_batch(raw_batch)
            store.filler = batch_index >= prepared.real_batches
            if recorder is not None:
                indices = recorder.seen[batch_index]
                trainer.run_state.predict_batch_indices = indices
                if not store.filler:
                    trainer.run_state.predict_epoch_batch_indices[loader_index].append(indices)
            batch = transfer(raw_batch, loader_index)
            for hook in start_hooks:
                hook(trainer, module, batch, batch_index, *extra)
            module_start(batch, batch_index, *extra)
            output = step_module(batch, batch_index, *extra) if with_index else step_module(batch, *extra)
            if output is None and loop is PREDICT and not warned_none:
                warned_none = True  # once per predict, as Lightning's warning cache
                warnings.warn(
                    f"predict returned None (predict_step, batch {batch_index}): if it was on purpose, ignore this "
                    f"warning; otherwise return the batch's predictions from predict_step.", CoreWarning, stacklevel=2
                )
            for hook in end_hooks:
                hook(trainer, module, output, batch, batch_index, *extra)
            module_end(output, batch, batch_index, *extra)
            if not store.filler and not trainer.sanity_checking:
                _log_step_values(trainer, store, loader_index)
            if outputs is not None and not store.filler:
                kept.append(output)
        store.filler = False
        if outputs is not None:
            outputs.append(kept)


def _log_step_values(trainer: Trainer, store: MetricStore, loader_index: int) -> None:
    """The batch's step values (``self.log(..., on_step=True)``) go to the loggers at once, as in Lightning: under the
    number of this loader's batches done before it in this entry point (fit's validations continue the count); those
    logged with ``prog_bar=True`` stay in ``progress_bar_metrics`` (not in ``callback_metrics``, as in Lightning)."""
    seen = trainer.run_state.eval_logged_batches
    step = seen.get(loader_index, 0)
    seen[loader_index] = step + 1
    metrics = store.step_metrics(for_logger=True)
    if metrics:
        trainer.log_to_loggers(metrics, step=step)
    trainer.run_state.eval_step_bar.update(store.step_metrics(for_logger=False, for_prog_bar=True))


def run_loop(
    trainer: Trainer, loop: EvalLoop, loaders: Sequence[PreparedLoader], max_batches: float | None = None,
    record: bool = True, outputs: list[list[Any]] | None = None, store: MetricStore | None = None,
) -> dict[str, float]:
    """One pass of ``loop`` (validation, test or predict); returns its epoch values.

    :param record: Put the epoch values into ``callback_metrics`` and the loggers (not for the sanity check).
    :param store: Where ``self.log`` records during the pass (a fresh one by default).
    """
    module, hooks = trainer.module, trainer.run_state.hooks
    assert module is not None
    store, previous_store = store if store is not None else new_store(trainer), trainer.run_state.metrics
    step_module = trainer.run_state.step_module
    dispatcher = step_module.module  # the StepModule inside the strategy's wrapper
    previous_step = dispatcher.__dict__["step"]
    trainer.run_state.metrics = store
    dispatcher.use(getattr(module, loop.step))
    try:
        with model_mode(module, step_module, loop), _no_grad(trainer):
            store.enter(EPOCH)
            hooks.call(loop.start, trainer, module)
            getattr(module, loop.start)()
            hooks.call(loop.epoch_start, trainer, module)
            getattr(module, loop.epoch_start)()
            _run_batches(trainer, loop, loaders, store, max_batches, outputs)
            store.enter(EPOCH)
            hooks.call(loop.epoch_end, trainer, module)
            getattr(module, loop.epoch_end)()
            values = store.compute_epoch()
            if record:
                trainer.record_epoch_values(values, store, log=True)
            hooks.call(loop.end, trainer, module)
            getattr(module, loop.end)()
    finally:
        store.reset_metrics()  # torchmetrics objects start the next run empty (the sanity check's too)
        dispatcher.use(previous_step)
        trainer.run_state.metrics = previous_store
    return values


def validate_in_fit(trainer: Trainer, loaders: Sequence[PreparedLoader], sanity: bool = False) -> None:
    """The validation loop as fit runs it: periodically, or a few batches as a sanity check first."""
    if not loaders:
        return
    if not sanity:
        run_loop(trainer, VALIDATION, loaders)
        return
    steps = trainer.config.num_sanity_val_steps
    module = trainer.attached_module()
    trainer.sanity_checking = True
    try:
        trainer.run_state.hooks.call("on_sanity_check_start", trainer, module)
        run_loop(trainer, VALIDATION, loaders, max_batches=math.inf if steps in (-1, math.inf) else steps,
                 record=False)
        trainer.run_state.hooks.call("on_sanity_check_end", trainer, module)
    finally:
        trainer.sanity_checking = False


def _per_loader(values: dict[str, float], count: int, owners: dict[str, set[int]]) -> list[dict[str, float]]:
    """Split epoch values by loader: a value logged in the steps of one loader only (``owners``) or suffixed
    ``/dataloader_idx_N`` is that loader's; the others (logged in epoch hooks) belong to every loader."""
    if count <= 1:
        return [dict(values)]
    results: list[dict[str, float]] = [{} for _ in range(count)]
    for name, value in values.items():
        head, _, index = name.rpartition("/dataloader_idx_")
        if len(owners.get(name, ())) == 1 and min(owners[name]) < count:
            results[min(owners[name])][name] = value
        elif head and index.isdigit() and int(index) < count:
            results[int(index)][name] = value
        else:
            for result in results:
                result[name] = value
    return results


def run_evaluation(trainer: Trainer, stage: str, loaders: Sequence[PreparedLoader]) -> list[dict[str, float]]:
    """``Trainer.validate`` / ``Trainer.test``: one pass, one dict of epoch values per loader."""
    store = new_store(trainer)
    values = run_loop(trainer, VALIDATION if stage == "validate" else TEST, loaders, store=store)
    return _per_loader(values, len(loaders), store.loaders_of())


class IndexRecorder:
    """A batch sampler that remembers the dataset indices of every batch it hands out, in order.

    Batches are drawn ahead of the one being predicted when workers prefetch, so a batch's indices are looked up
    by its position (``seen[batch_idx]``), never taken as "the latest".
    """

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.seen: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        self.seen = []
        for indices in self.batch_sampler:
            self.seen.append(list(indices))
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)


def _recording(prepared: PreparedLoader) -> tuple[PreparedLoader, IndexRecorder | None]:
    loader = prepared.loader
    if loader.batch_sampler is None or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return prepared, None  # no sampler to ask: batch indices are unknown, as in Lightning
    recorder = IndexRecorder(loader.batch_sampler)
    rebuilt = torch.utils.data.DataLoader(loader.dataset, batch_sampler=recorder, **copied_arguments(loader))
    return attrs.evolve(prepared, loader=rebuilt), recorder


def run_predict(trainer: Trainer, loaders: Sequence[PreparedLoader]) -> Any:
    """``Trainer.predict``: this process's predictions, a list per loader (one list for one loader).

    The dataset indices of each batch are recorded for prediction writers: ``run_state.predict_batch_indices``
    (the current batch) and ``run_state.predict_epoch_batch_indices`` (per loader, per real batch).
    """
    recorded = [_recording(prepared) for prepared in loaders]
    state = trainer.run_state
    state.predict_recorders = [recorder for _, recorder in recorded]
    state.predict_epoch_batch_indices = [[] for _ in recorded]
    outputs: list[list[Any]] = []
    state.predictions = outputs
    try:
        run_loop(trainer, PREDICT, [prepared for prepared, _ in recorded], record=False, outputs=outputs)
    finally:
        state.predict_recorders = []
    return outputs[0] if len(outputs) == 1 else outputs
