"""The fit loop: epochs of training batches, validation at its interval, and where a checkpoint resumes.

A training batch, with automatic optimization (each hook: the callbacks', then the Module's, as in Lightning)::

    on_train_batch_start                       (-1 from the Module ends the epoch)
    [first batch of an accumulation window]    on_before_zero_grad, optimizer_zero_grad for each optimizer
    training_step (as the set-up module's forward; under no_backward_sync unless it is the window's last)
    on_before_backward, the Module's backward(loss / accumulate_grad_batches), on_after_backward
    [last batch of the window]                 on_before_optimizer_step, configure_gradient_clipping, the step
                                               of each optimizer; global_step += 1; step-interval schedulers
    on_train_batch_end                         (checkpoints by step save here)
    step metrics to the loggers every log_every_n_steps optimizer steps
    on_validation_model_zero_grad and validation, when its interval is reached

With an overridden ``optimizer_step`` (or an optimizer that needs a closure, LBFGS) everything from the zeroing to
the clipping runs in the closure the Module's ``optimizer_step`` hands to the optimizer.

The end of an epoch::

    epoch values of the training metrics  ->  on_train_epoch_end (ordinary callbacks, then the Module)
    epoch values again (with what those hooks logged) to the loggers; epoch-interval schedulers
    on_train_epoch_end of EarlyStopping and ModelCheckpoint  (a checkpoint here resumes at the next epoch)

Nothing per batch goes through pluggy or converts a tensor to a number except what the Lite calls do and
what is logged at a logging step.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import torch

from core._errors import ConfigurationError
from core.trainer._checkpoint import restore_rng, sample_position, snapshot_rng
from core.trainer._data import PreparedLoader, batch_transfer, epoch_setters, overrides
from core.trainer._eval import validate_in_fit
from core.trainer._logging import EPOCH, TRAIN_BATCH
from core.trainer._optim import step_schedulers
from core.trainer._samples import RemainderSampler, epoch_samples, resized_remainder, sampler_swapped
from core.trainer._signatures import takes_batch_idx

_log = logging.getLogger("core.trainer")  # INFO lines reach handlers where "core" is set to INFO (core.lightning)

if TYPE_CHECKING:
    from core.profilers import Profiler
    from core.trainer._view import LoopView as Trainer  # the protocol: the Trainer's class imports this module

Reload: TypeAlias = Callable[[], dict[str, Any]]
"""Sets the fit's loaders up again (``reload_dataloaders_every_n_epochs``): ``{"train": ..., "val": [...]}``."""


def loss_of(output: Any) -> torch.Tensor | None:
    """The loss in what ``training_step`` returned: the tensor itself, ``output["loss"]``, or ``None`` (skip)."""
    if output is None or isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        if "loss" not in output:
            raise ConfigurationError(
                f"training_step returned a dict without 'loss' (keys: {sorted(output)}); put the loss under 'loss'."
            )
        loss: torch.Tensor = output["loss"]
        return loss
    raise ConfigurationError(
        f"training_step returned a {type(output).__qualname__}; return the loss tensor, a dict with 'loss', or None."
    )


class FitLoop:
    """The fit loop of one run: per-run constants are read once here, so that a batch costs little."""

    def __init__(
        self, trainer: Trainer, train: PreparedLoader, val: Sequence[PreparedLoader], reload: Reload | None = None
    ) -> None:
        module = trainer.module
        assert module is not None
        self.trainer = trainer
        self.module = module
        self.train = train
        self.val = list(val)
        self.reload = reload
        self.reload_every = trainer.config.reload_dataloaders_every_n_epochs
        self.lite = trainer.lite
        self.step_module = trainer.run_state.step_module
        # Lightning's rule, read once: ``training_step(self, batch)`` gets no batch_idx.
        self.step_takes_index = takes_batch_idx(module.training_step)
        self.transfer = batch_transfer(trainer.lite, module, trainer.datamodule)
        self.backward = module.backward
        self.optimizers = trainer.optimizers
        # An overridden optimizer_step, or an optimizer whose step needs the closure (LBFGS evaluates the loss
        # several times a step): the forward and backward then run inside the closure, as Lightning always runs them.
        self.custom_step = overrides(module, "optimizer_step") or any(map(steps_with_a_closure, self.optimizers))
        self.store = trainer.run_state.train_metrics
        self.schedulers = trainer.lr_scheduler_configs
        self.step_schedulers = [config for config in self.schedulers if config.interval == "step"]
        self.accumulate = trainer.accumulate_grad_batches
        self.log_every = trainer.log_every_n_steps
        self.clip_value = trainer.config.gradient_clip_val
        self.automatic = module.automatic_optimization
        self.has_val = bool(self.val) and any(loader.batches > 0 for loader in self.val)
        self.val_every = self._val_every()
        self.epoch_setters = epoch_setters(train.loader)
        self.backward_in_window = False
        self.minimums_said = False  # the INFO line on a stop refused by min_epochs / min_steps, said once
        hooks = trainer.run_state.hooks
        self.cb_batch_start = hooks["on_train_batch_start"]
        self.cb_batch_end = hooks["on_train_batch_end"]
        self.cb_before_backward = hooks["on_before_backward"]
        self.cb_after_backward = hooks["on_after_backward"]
        self.cb_before_step = hooks["on_before_optimizer_step"]
        self.cb_before_zero_grad = hooks["on_before_zero_grad"]
        self.profiler = trainer.active_profiler
        if self.profiler is not None:  # Lightning's action names; without a profiler nothing is wrapped
            self._profile(self.profiler, type(trainer.lite.strategy).__name__, type(module).__name__)

    def _profile(self, profiler: Profiler, strategy: str, module_name: str) -> None:
        wrap = profiler.wrap
        self._epoch = wrap("run_training_epoch", self._epoch)  # type: ignore[method-assign]
        self._batch = wrap("run_training_batch", self._batch)  # type: ignore[method-assign]
        self.step_module = wrap(f"[Strategy]{strategy}.training_step", self.step_module)
        self.backward = wrap(f"[Strategy]{strategy}.backward", self.backward)
        self._step_optimizer = wrap(  # type: ignore[method-assign]
            f"[LightningModule]{module_name}.optimizer_step", self._step_optimizer)

    def _val_every(self) -> float:
        """Validate when the batch count (in the epoch, or overall) is a multiple of this."""
        interval = self.trainer.config.val_check_interval
        if isinstance(interval, int):
            per_epoch = self.train.batches  # validation within each epoch could never be reached: Lightning's error
            if 0 < per_epoch < interval and self.trainer.config.check_val_every_n_epoch is not None:
                raise ConfigurationError(
                    f"`val_check_interval` ({interval}) must be less than or equal to the number of the training "
                    f"batches ({per_epoch:g}). If you want to disable validation set `limit_val_batches` to 0.0 "
                    f"instead. If you want to validate based on the total training batches, set "
                    f"`check_val_every_n_epoch=None`."
                )
            return float(interval)
        if math.isinf(self.train.batches):
            if interval != 1.0:
                raise ConfigurationError(
                    f"val_check_interval={interval} is a fraction of the epoch, but the training DataLoader has no "
                    f"length; pass a number of batches (int)."
                )
            return math.inf  # at the end of the epoch, when the data runs out
        return float(max(1, int(self.train.batches * interval)))

    # ---------------------------------------------------------------------------------------------
    # Epochs
    # ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        progress = self.trainer.run_state.progress
        self.trainer.run_state.stopped_at = None  # the loop moves on from any earlier stop
        handles = self._count_manual_steps() if not self.automatic else []
        try:
            if progress.epoch_finished:  # resumed from a checkpoint taken at the end of an epoch
                self._advance()
                self._restore_rng_at_save()
            while not self._done():
                if self._should_reload():
                    self._reload()
                self._epoch()
        finally:
            for handle in handles:
                handle.remove()

    def _should_reload(self) -> bool:
        """``reload_dataloaders_every_n_epochs=n``: before every n-th epoch (never in the middle of one)."""
        progress = self.trainer.run_state.progress
        return (self.reload is not None and self.reload_every > 0 and progress.batches_done == 0
                and progress.epoch > 0 and progress.epoch % self.reload_every == 0)

    def _reload(self) -> None:
        assert self.reload is not None
        data = self.reload()
        self.train, self.val = data["train"], list(data["val"])
        self.has_val = bool(self.val) and any(loader.batches > 0 for loader in self.val)
        self.val_every = self._val_every()
        self.epoch_setters = epoch_setters(self.train.loader)

    def _done(self) -> bool:
        trainer, progress = self.trainer, self.trainer.run_state.progress
        if self.train.batches == 0:
            return True
        if trainer.max_epochs != -1 and progress.epoch >= trainer.max_epochs:
            return True
        if trainer.max_steps != -1 and progress.global_step >= trainer.max_steps:
            return True
        return self._stops_early()

    def _fit_stops(self) -> bool:
        """Whether the fit ends now for a reason other than its epochs (``max_steps``, or ``should_stop``)."""
        trainer, progress = self.trainer, self.trainer.run_state.progress
        if trainer.max_steps != -1 and progress.global_step >= trainer.max_steps:
            return True
        return self._stops_early()

    def _stops_early(self) -> bool:
        """``should_stop``, once ``min_epochs`` and ``min_steps`` are met; until then Lightning's INFO line, once."""
        if not self.trainer.should_stop:
            return False
        if self._minimums_met():
            return True
        if not self.minimums_said:
            self.minimums_said = True
            config = self.trainer.config
            _log.info(
                f"Trainer was signaled to stop but the required `min_epochs={config.min_epochs or None!r}` or "
                f"`min_steps={config.min_steps or None!r}` has not been met. Training will continue..."
            )
        return False

    def _minimums_met(self) -> bool:
        trainer, progress = self.trainer, self.trainer.run_state.progress
        return progress.epoch >= trainer.config.min_epochs and progress.global_step >= trainer.config.min_steps

    def _advance(self) -> None:
        progress = self.trainer.run_state.progress
        progress.epoch += 1
        progress.batches_done = 0
        progress.validated = True
        progress.epoch_finished = False

    def _restore_rng_at_save(self) -> None:
        if self.trainer.run_state.resume_rng is not None:
            at_save, _ = self.trainer.run_state.resume_rng
            if at_save is not None:
                restore_rng(at_save)
            self.trainer.run_state.resume_rng = None

    def _epoch(self) -> None:
        trainer, progress, module = self.trainer, self.trainer.run_state.progress, self.module
        resuming = progress.batches_done > 0
        if not resuming:
            self.store.reset_epoch()
            self.store.enter(EPOCH)
            trainer.run_state.hooks.call("on_train_epoch_start", trainer, module)
            module.on_train_epoch_start()
            self.accumulate = trainer.accumulate_grad_batches  # a callback may have changed it for this epoch
        self.store.enter(TRAIN_BATCH)
        for set_epoch in self.epoch_setters:
            set_epoch(progress.epoch)
        if resuming and trainer.run_state.resume_rng is not None and trainer.run_state.resume_rng[1] is not None:
            restore_rng(trainer.run_state.resume_rng[1])  # the generators as they were when this epoch's data was drawn
        trainer.run_state.epoch_start_rng = snapshot_rng()
        remainder = self._resized_remainder(resuming)
        whole = len(self.train.loader) if remainder is not None else 0
        with sampler_swapped(self.train.loader, remainder):
            first_batch = 0  # the loop's count of batches done when this iteration starts
            if remainder is not None:  # the remaining batches on this world size end where a whole epoch would
                first_batch = progress.batches_done = max(0, whole - len(self.train.loader))
            trainer.run_state.epoch_samples = epoch_samples(self.train.loader, progress.epoch, first_batch)
            exhausted, stopped = self._batches(resuming, skip=remainder is None)
        if exhausted and not stopped and math.isinf(self.val_every) and self._val_epoch():
            self._validate()
        mid_epoch = stopped and not exhausted and progress.batches_done < self.train.batches and self._fit_stops()
        if mid_epoch:
            # The fit stops in the middle of the epoch. Its end runs as Lightning runs it, but a checkpoint saved from
            # here on (in on_train_epoch_end, or trainer.save_checkpoint after fit) resumes the epoch where it stopped.
            trainer.run_state.stopped_at = (attrs.evolve(progress), sample_position(trainer))
        self._epoch_end(schedulers=not mid_epoch)

    def _resized_remainder(self, resuming: bool) -> RemainderSampler | None:
        """For a resumed epoch: the sampler of its remaining samples on another world size, or ``None`` to skip."""
        run_state = self.trainer.run_state
        saved, run_state.resume_samples = run_state.resume_samples, None  # used by the first epoch only
        if saved is None or not resuming:
            return None
        position, saved_world_size = saved
        return resized_remainder(self.train.loader, position, saved_world_size, self.lite.world_size,
                                 run_state.progress.batches_done)

    def _batches(self, resuming: bool, skip: bool) -> tuple[bool, bool]:
        """The epoch's training batches; ``(exhausted, stopped)``: whether the data ran out, or the loop stopped."""
        progress = self.trainer.run_state.progress
        iterator: Iterator[Any] = iter(self.train.loader)
        if self.profiler is not None:
            iterator = self.profiler.wrap_iterator("[_TrainingEpochLoop].train_dataloader_next", iterator)
        exhausted = False
        if resuming:
            exhausted = self._skip(iterator, progress.batches_done) if skip else False
            self._restore_rng_at_save()
            if not progress.validated:
                self._validate()
        stopped = False
        while not exhausted and progress.batches_done < self.train.batches:
            try:
                batch = next(iterator)
            except StopIteration:
                exhausted = True
                break
            stopped = self._batch(batch, progress.batches_done)
            if stopped:
                break
        return exhausted, stopped

    @staticmethod
    def _skip(iterator: Any, count: int) -> bool:
        """Draw the ``count`` batches a resumed epoch already trained on; ``True`` if the data ran out."""
        for _ in range(count):
            try:
                next(iterator)
            except StopIteration:
                return True
        return False

    def _epoch_end(self, schedulers: bool = True) -> None:
        """The end of the epoch; ``schedulers=False`` at a stop in its middle: epoch-interval schedulers step when
        all its batches are done (Lightning's ``_num_ready_batches_reached``), so a continued epoch steps them once."""
        trainer, progress, module, store = self.trainer, self.trainer.run_state.progress, self.module, self.store
        hooks = trainer.run_state.hooks
        store.enter(EPOCH)
        trainer.record_epoch_values(store.compute_epoch(), store, log=False)
        hooks.call_epoch_end(trainer, module, after_metrics=False)
        module.on_train_epoch_end()
        trainer.record_epoch_values(store.compute_epoch(), store, log=True)
        if schedulers and self.automatic:  # under manual optimization the Module steps its schedulers (Lightning)
            step_schedulers(self.schedulers, "epoch", progress.epoch + 1, lambda: trainer.callback_metrics,
                            module.lr_scheduler_step)
        progress.epoch_finished = True
        hooks.call_epoch_end(trainer, module, after_metrics=True)
        store.reset_metrics()
        self._advance()
        store.enter(TRAIN_BATCH)

    # ---------------------------------------------------------------------------------------------
    # Batches
    # ---------------------------------------------------------------------------------------------

    def _batch(self, raw_batch: Any, batch_idx: int) -> bool:
        """Train on one batch; ``True`` when the epoch must end here."""
        trainer, progress, module = self.trainer, self.trainer.run_state.progress, self.module
        self.store.new_batch(raw_batch)
        # The loggers' step for this batch's values, Lightning's count: batches that stepped before it.
        trainer.run_state.batch_logger_step = progress.global_step if self.automatic else progress.total_batches
        batch = self.transfer(raw_batch, 0)
        for hook in self.cb_batch_start:
            hook(trainer, module, batch, batch_idx)
        if module.on_train_batch_start(batch, batch_idx) == -1:
            return True
        steps_before = progress.global_step
        if self.automatic:
            output = self._automatic_step(batch, batch_idx)
        else:
            output = self.step_module(batch, batch_idx) if self.step_takes_index else self.step_module(batch)
        progress.batches_done += 1
        progress.total_batches += 1
        due = self.has_val and self._val_due()
        progress.validated = not due
        for end_hook in self.cb_batch_end:
            end_hook(trainer, module, output, batch, batch_idx)
        module.on_train_batch_end(output, batch, batch_idx)
        if progress.global_step != steps_before and progress.global_step % self.log_every == 0 and trainer.loggers:
            self._log_step()
        if due:
            self._validate()
        return self._fit_stops()

    def _val_epoch(self) -> bool:
        every_n = self.trainer.config.check_val_every_n_epoch
        return every_n is None or (self.trainer.run_state.progress.epoch + 1) % every_n == 0

    def _val_due(self) -> bool:
        progress = self.trainer.run_state.progress
        if not self._val_epoch():
            return False
        count = progress.total_batches if self.trainer.config.check_val_every_n_epoch is None else progress.batches_done
        return count % self.val_every == 0

    def _validate(self) -> None:
        if not self.backward_in_window:  # no gradients are waiting for a step: free them during validation
            self.module.on_validation_model_zero_grad()
        validate_in_fit(self.trainer, self.val)
        self.trainer.run_state.progress.validated = True

    def _log_step(self) -> None:
        metrics = self.store.step_metrics(for_logger=True)
        if metrics:
            self.trainer.log_to_loggers(metrics)

    def _automatic_step(self, batch: Any, batch_idx: int) -> Any:
        progress = self.trainer.run_state.progress
        accumulate = self.accumulate
        if accumulate == 1:
            if self.custom_step:
                return self._custom_step(batch, batch_idx, zero_grad=True)
            output = self._forward_backward(batch, batch_idx, zero_grad=True)
            if self.backward_in_window:
                self._optimizer_step(batch_idx)
            return output
        done = progress.batches_done
        first_of_window = done % accumulate == 0
        last_of_window = (done + 1) % accumulate == 0 or done + 1 >= self.train.batches
        if last_of_window:
            if self.custom_step:
                return self._custom_step(batch, batch_idx, zero_grad=first_of_window)
            output = self._forward_backward(batch, batch_idx, zero_grad=first_of_window)
            if self.backward_in_window:
                self._optimizer_step(batch_idx)
        else:
            with self.lite.no_backward_sync(self.step_module):
                output = self._forward_backward(batch, batch_idx, zero_grad=first_of_window)
        return output

    def _forward_backward(self, batch: Any, batch_idx: int, zero_grad: bool) -> Any:
        """On the first batch of an accumulation window the optimizers' ``zero_grad``, then ``training_step`` and
        the backward of its loss: Lightning's closure, except that Lightning zeroes between the step and the
        backward. Here the gradients are zeroed first because a strategy may compute them inside the step (the
        pipeline schedule runs every backward pass in the set-up module's forward)."""
        trainer, module = self.trainer, self.module
        if zero_grad:
            self._zero_grad(batch_idx)
        output = self.step_module(batch, batch_idx) if self.step_takes_index else self.step_module(batch)
        loss = loss_of(output)
        if loss is None:
            return output
        if self.accumulate > 1:
            loss = loss / self.accumulate
        for hook in self.cb_before_backward:
            hook(trainer, module, loss)
        module.on_before_backward(loss)
        self.backward(loss)
        for hook in self.cb_after_backward:
            hook(trainer, module)
        module.on_after_backward()
        self.backward_in_window = True
        return output

    def _zero_grad(self, batch_idx: int) -> None:
        trainer, module = self.trainer, self.module
        epoch = trainer.run_state.progress.epoch
        for optimizer in self.optimizers:
            for hook in self.cb_before_zero_grad:
                hook(trainer, module, optimizer)
            module.on_before_zero_grad(optimizer)
            module.optimizer_zero_grad(epoch, batch_idx, optimizer)

    def _before_step(self, optimizer: Any) -> None:
        """The hooks between the last backward of a step and the step: on_before_optimizer_step, clipping."""
        trainer, module = self.trainer, self.module
        for hook in self.cb_before_step:
            hook(trainer, module, optimizer)
        module.on_before_optimizer_step(optimizer)
        module.configure_gradient_clipping(optimizer, gradient_clip_val=self.clip_value,
                                           gradient_clip_algorithm=trainer.config.gradient_clip_algorithm)

    def _optimizer_step(self, batch_idx: int) -> None:
        for optimizer in self.optimizers:
            self._before_step(optimizer)
            self._step_optimizer(optimizer)
        self._after_step()

    @staticmethod
    def _step_optimizer(optimizer: Any) -> None:
        optimizer.step()

    def _custom_step(self, batch: Any, batch_idx: int, zero_grad: bool) -> Any:
        """An overridden ``optimizer_step``: the forward and backward run in the closure it hands to the optimizer.

        Each call of the closure (LBFGS evaluates several times) zeroes the gradients when the batch opens an
        accumulation window, then runs ``training_step`` and the backward; the step counts once the Module's
        ``optimizer_step`` returns.
        """
        module, epoch = self.module, self.trainer.run_state.progress.epoch
        outputs: list[Any] = []
        for optimizer in self.optimizers:

            def closure(optimizer: Any = optimizer) -> Any:
                output = self._forward_backward(batch, batch_idx, zero_grad=zero_grad)
                outputs.append(output)
                self._before_step(optimizer)
                return loss_of(output)

            module.optimizer_step(epoch, batch_idx, optimizer, closure)
        self._after_step()
        return outputs[-1] if outputs else None

    def _after_step(self) -> None:
        trainer, module, progress = self.trainer, self.module, self.trainer.run_state.progress
        self.backward_in_window = False
        progress.global_step += 1
        if self.step_schedulers:
            step_schedulers(self.step_schedulers, "step", progress.global_step, lambda: trainer.callback_metrics,
                            module.lr_scheduler_step)

    def _count_manual_steps(self) -> list[Any]:
        """With manual optimization, every optimizer step the Module takes counts as a global step, and runs the
        callbacks' and the Module's ``on_before_optimizer_step`` first (as Lightning's optimizer wrapper does)."""
        trainer, module, progress = self.trainer, self.module, self.trainer.run_state.progress

        def count(*_: Any) -> None:
            progress.global_step += 1

        def before_step(optimizer: Any) -> Callable[..., None]:
            def hooks(*_: Any) -> None:
                for hook in self.cb_before_step:
                    hook(trainer, module, optimizer)
                module.on_before_optimizer_step(optimizer)
            return hooks

        handles = []
        for optimizer in self.optimizers:
            handles.append(optimizer.optimizer.register_step_pre_hook(before_step(optimizer)))
            handles.append(optimizer.optimizer.register_step_post_hook(count))
        return handles


def run_fit(
    trainer: Trainer, train: PreparedLoader, val: Sequence[PreparedLoader], reload: Reload | None = None
) -> None:
    """``Trainer.fit`` in this process, after setup and any restore; ``reload`` sets the loaders up again."""
    module, hooks = trainer.module, trainer.run_state.hooks
    assert module is not None
    hooks.call("on_fit_start", trainer, module)
    module.on_fit_start()
    module.zero_grad()  # no gradients left from before the run (Lightning's start of every stage)
    loop = FitLoop(trainer, train, val, reload)
    if loop.has_val and trainer.config.num_sanity_val_steps != 0:
        validate_in_fit(trainer, val, sanity=True)
    loop.store.enter(EPOCH)  # what on_train_start logs is an epoch value of the first epoch, as in Lightning
    hooks.call("on_train_start", trainer, module)
    module.on_train_start()
    loop.run()
    hooks.call("on_train_end", trainer, module)
    module.on_train_end()
    hooks.call("on_fit_end", trainer, module)
    module.on_fit_end()


def steps_with_a_closure(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` cannot run without a closure (``torch.optim.LBFGS``): its ``closure`` parameter has
    no default. A set-up optimizer is asked about the optimizer it wraps."""
    inner = getattr(optimizer, "set_up_optimizer", optimizer)
    try:
        closure = inspect.signature(type(inner).step).parameters.get("closure")
    except (TypeError, ValueError):  # a step without a readable signature (a C extension): none required
        return False
    return closure is not None and closure.default is inspect.Parameter.empty
