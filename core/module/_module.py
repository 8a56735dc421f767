"""``Module`` and ``DataModule``, and ``TrainerView``: the Trainer as they see it.

They name each other (``module.trainer`` is a :class:`TrainerView`, whose ``model`` is the :class:`Module`), so
they live in one module: no module of ``core`` imports itself back, annotations included
(``tests/test_import_cycles.py``). ``core.module`` re-exports them; see its docstring for what each does.

The Trainer sits above ``core.module``, ``core.callbacks`` and ``core.loggers`` in the layers, so those packages
never name its class, not even in annotations (``tests/test_trainer_view.py`` checks, type-only imports
included): they are typed against :class:`TrainerView`, which :class:`core.Trainer` satisfies structurally (mypy
checks it where the Trainer attaches itself to a Module). What is not there (the loops' run state, the Trainer's
private attributes) is the Trainer's own business.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch

from core._errors import CheckpointError, ConfigurationError, CoreError, CoreWarning
from core.module._hparams import _HyperparametersMixin, read_hparams_file

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from typing_extensions import Self

    from core.lite import Lite
    from core.loggers import Logger
    from core.module._optimizers import SchedulerConfig

__all__ = ["DataModule", "MetricSink", "Module", "TrainerView"]

Stage = Literal["fit", "validate", "test", "predict"]


def _is_metric(value: Any) -> bool:
    """Whether ``value`` is a ``torchmetrics.Metric`` (torchmetrics is never imported here: no Metric exists before)."""
    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(value, torchmetrics.Metric)


class Module(_HyperparametersMixin, torch.nn.Module):
    """A ``torch.nn.Module`` that knows how to train, validate, test and predict with itself.

    Override :meth:`training_step` and :meth:`configure_optimizers` at least. The Trainer calls every
    step method inside the set-up module's forward, so the strategy (DDP, FSDP) and the precision see the
    whole step; call ``self(x)`` (your :meth:`forward`) inside the steps as usual.
    """

    CHECKPOINT_HYPER_PARAMS_KEY: ClassVar[str] = "hyper_parameters"
    """The key of the hyperparameters (``save_hyperparameters``) in a checkpoint, as Lightning names it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Plain attributes (not submodules, not pickled with a live trainer): see __getstate__.
        self.__dict__["_trainer"] = None
        self.__dict__["_automatic_optimization"] = True

    # ---------------------------------------------------------------------------------------------
    # What the user overrides
    # ---------------------------------------------------------------------------------------------

    # The step methods take ``*args, **kwargs`` as Lightning's do, so that an override with its own signature
    # (``validation_step(self, batch, batch_idx)``, without ``dataloader_idx``) type-checks; the Trainer passes
    # ``(batch, batch_idx)``, plus ``dataloader_idx`` when there are several evaluation loaders.

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the loss of one training batch: ``training_step(batch, batch_idx)``.

        :return: The loss tensor, a dict with the loss under ``"loss"``, or ``None`` to skip this batch
            (no backward, no optimizer step).
        """
        raise CoreError(
            f"{type(self).__qualname__} does not override training_step(batch, batch_idx), which fit() needs."
        )

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one validation batch, ``validation_step(batch, batch_idx[, dataloader_idx])``; log what you
        measure with :meth:`log`."""
        raise CoreError(
            f"{type(self).__qualname__} has validation data but does not override validation_step(batch, batch_idx)."
        )

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one test batch, ``test_step(batch, batch_idx[, dataloader_idx])``; log what you measure with
        :meth:`log`."""
        raise CoreError(f"{type(self).__qualname__} does not override test_step(batch, batch_idx), which test() needs.")

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Return the prediction for one batch, ``predict_step(batch, batch_idx[, dataloader_idx])``; by default
        ``self(batch)``."""
        batch = kwargs["batch"] if "batch" in kwargs else args[0]
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return the optimizers and learning-rate schedulers to train with.

        Any of: an optimizer; a list or tuple of optimizers; ``([optimizers], [schedulers])``; a dict
        ``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler": ..., "interval": "epoch" | "step",
        "frequency": 1, "monitor": "val_loss", "strict": True, "name": None}}``; or a list of such dicts.
        """
        raise CoreError(f"{type(self).__qualname__} does not override configure_optimizers(), which fit() needs.")

    def train_dataloader(self) -> Any:
        """Training data, used when neither ``fit(train_dataloaders=...)`` nor a DataModule gives it."""
        return None

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        return None

    def predict_dataloader(self) -> Any:
        return None

    # Hooks: see docs/trainer-module.md for the order. Each is called on every rank unless said otherwise.

    def prepare_data(self) -> None:
        """Download or write to disk, on local rank 0 of each node; the other processes wait."""

    def setup(self, stage: str) -> None:
        """Called at the start of fit / validate / test / predict, after the DataModule's ``setup``."""

    def teardown(self, stage: str) -> None:
        """Called at the end of fit / validate / test / predict."""

    def on_fit_start(self) -> None: ...

    def on_fit_end(self) -> None: ...

    def on_train_start(self) -> None: ...

    def on_train_end(self) -> None: ...

    def on_train_epoch_start(self) -> None: ...

    def on_train_epoch_end(self) -> None: ...

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Return ``-1`` to end the epoch here."""
        return None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...

    def on_validation_start(self) -> None: ...

    def on_validation_end(self) -> None: ...

    def on_validation_epoch_start(self) -> None: ...

    def on_validation_epoch_end(self) -> None: ...

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_test_start(self) -> None: ...

    def on_test_end(self) -> None: ...

    def on_test_epoch_start(self) -> None: ...

    def on_test_epoch_end(self) -> None: ...

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_predict_start(self) -> None: ...

    def on_predict_end(self) -> None: ...

    def on_predict_epoch_start(self) -> None: ...

    def on_predict_epoch_end(self) -> None: ...

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_before_backward(self, loss: torch.Tensor) -> None: ...

    def on_after_backward(self) -> None: ...

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Called once the gradients of a step are accumulated, before they are clipped and applied."""

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...

    # -- the batch on its way to the device (Lightning's names; a DataModule may override them instead) ----------

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change the batch before it moves to the device (CPU-side augmentation); return it."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move the batch to ``device``; by default every tensor in nested lists, tuples and dicts is moved."""
        return self.trainer.lite.to_device(batch)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change the batch once it is on the device (GPU-side augmentation); return it."""
        return batch

    # -- the optimization step, overridable (Lightning's names and default behaviour) -----------------------

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute the gradients of ``loss`` through the strategy and precision (``Lite.backward``)."""
        self.trainer.lite.backward(loss, *args, **kwargs)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip before each optimizer step; receives the Trainer's ``gradient_clip_val`` / ``_algorithm``.

        Called at every step of automatic optimization; the default calls :meth:`clip_gradients` with them, which
        clips only when ``gradient_clip_val`` is set.
        """
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: torch.optim.Optimizer,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Step ``optimizer``. Override to change how (learning-rate warm-up, skipping steps); call
        ``optimizer.step(closure=optimizer_closure)``: the closure runs ``training_step`` and the backward pass,
        so a step that never calls it trains nothing on that batch.
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Zero the gradients before a step's first backward; override for ``set_to_none=False`` and the like."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step a learning-rate scheduler (``metric`` for ``ReduceLROnPlateau``-like ones, else ``None``)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_callbacks(self) -> Any:
        """Callbacks this Module needs, added when fit / validate / test / predict starts.

        A callback of the same class as one given to the Trainer replaces it (Lightning's rule).
        """
        return []

    # -- evaluation mode (called only when overridden; by default every submodule's mode is put back) --------

    def _step_module(self) -> torch.nn.Module:
        # The set-up module (the strategy's wrapper around the Trainer's StepModule), so that a wrapper with its
        # own eval()/train() sees the switch, as Lightning's ``self.trainer.model.eval()``.
        step_module = self.trainer.step_module
        if step_module is None:
            raise CoreError(f"{type(self).__qualname__}: the model's eval / train mode is switched during a run only.")
        return step_module

    def on_validation_model_zero_grad(self) -> None:
        """Called by fit before each validation (not the sanity check) outside an accumulation window: releases
        the gradients, so validation does not hold their memory."""
        self.zero_grad()

    def on_validation_model_eval(self) -> None:
        self._step_module().eval()

    def on_validation_model_train(self) -> None:
        self._step_module().train()

    def on_test_model_eval(self) -> None:
        self._step_module().eval()

    def on_test_model_train(self) -> None:
        self._step_module().train()

    def on_predict_model_eval(self) -> None:
        self._step_module().eval()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add your own entries to a checkpoint about to be written (keys not used by the Trainer)."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read your own entries back, before the Trainer restores its state from ``checkpoint``."""

    # ---------------------------------------------------------------------------------------------
    # What the Trainer provides
    # ---------------------------------------------------------------------------------------------

    # torch.jit.script compiles properties unless named here; these read Python state (the Trainer, __dict__), so a
    # scripted Module skips them, as Lightning's does.
    __jit_unused_properties__: ClassVar[list[str]] = [
        "trainer", "attached", "automatic_optimization", "device", "device_mesh", "example_input_array", "logger",
        "loggers", "global_rank", "local_rank", "current_epoch", "global_step", "hparams", "hparams_for_loggers",
        "logs_hparams", "lite",
    ]

    @property
    def trainer(self) -> TrainerView:
        """The Trainer that runs this module, or ran it last: as in Lightning, it stays after ``fit`` returns (so
        ``self.trainer`` and ``self.optimizers()`` still answer) until another Trainer takes the module."""
        trainer: TrainerView | None = self.__dict__.get("_trainer")
        if trainer is None:
            raise CoreError(f"{type(self).__qualname__} is not attached to a Trainer; use it inside trainer.fit(...).")
        return trainer

    @trainer.setter
    def trainer(self, trainer: TrainerView | None) -> None:
        """Attach the Trainer about to run this module (``None``: forget it); the Trainer does it at a run's start."""
        self.__dict__["_trainer"] = trainer
        if trainer is not None:
            self.__dict__["_running"] = True
        else:
            self.__dict__.pop("_running", None)

    def _end_run(self) -> None:
        """Called by the Trainer when fit / validate / test / predict returns: the module keeps :attr:`trainer`, but
        :attr:`attached` is ``False`` again, so :attr:`device` is where the parameters are and ``self.log`` does
        nothing."""
        self.__dict__.pop("_running", None)  # between runs the module holds what a fresh one holds, and its trainer

    @property
    def attached(self) -> bool:
        """Whether a Trainer is running this module now."""
        return self.__dict__.get("_trainer") is not None and bool(self.__dict__.get("_running"))

    @property
    def lite(self) -> Lite | None:
        """The :class:`core.Lite` that set this module up (``lite.setup(module, ...)``; Lightning's ``fabric``), or
        ``None``.

        A module that no Trainer has taken then works through its Lite, as a LightningModule does under Fabric:
        :meth:`log` and :meth:`log_dict` send the values to ``lite.log_dict`` (``logger=False``: nowhere),
        :attr:`logger` and :attr:`loggers` are the Lite's, :meth:`clip_gradients` is ``lite.clip_gradients``,
        :meth:`optimizers` the optimizers set up with it, :meth:`manual_backward` is ``lite.backward``, and the
        ranks are the Lite's. Once a Trainer runs the module, the Trainer answers instead.
        """
        return self.__dict__.get("_lite")

    def attach_to_lite(self, lite: Lite | None, optimizers: Sequence[Any] = ()) -> None:
        """Link this module to the ``lite`` that set it up, with the optimizers set up beside it (``Lite.setup`` calls
        it; ``None`` unlinks). See :attr:`lite`."""
        self.__dict__["_lite"] = lite
        self.__dict__["_lite_optimizers"] = list(optimizers)

    def _lite_mode(self) -> Lite | None:
        """The Lite to work through: set up by one and never taken by a Trainer."""
        return self.__dict__.get("_lite") if self.__dict__.get("_trainer") is None else None

    @property
    def automatic_optimization(self) -> bool:
        """``False`` to step the optimizers yourself in ``training_step`` (:meth:`manual_backward`)."""
        return bool(self.__dict__.get("_automatic_optimization", True))

    @automatic_optimization.setter
    def automatic_optimization(self, value: bool) -> None:
        self.__dict__["_automatic_optimization"] = bool(value)

    @property
    def device(self) -> torch.device:
        """The device of this process during a run; otherwise where the first parameter lives."""
        if self.attached:
            return self.trainer.lite.device
        parameter = next(self.parameters(), None)
        return parameter.device if parameter is not None else torch.device("cpu")

    @property
    def device_mesh(self) -> DeviceMesh | None:
        """The run's ``DeviceMesh`` under a strategy that builds one (``model_parallel``, ``pipeline``), else ``None``.

        Read it in :meth:`configure_model` to parallelize the layers (Lightning's ``self.device_mesh``).
        """
        return self.trainer.lite.device_mesh if self.attached else None

    @property
    def example_input_array(self) -> Any:
        """An example input (``forward``'s argument, a tuple for several, a dict for keywords), kept for code that
        reads it (exporters, your callbacks); ``ModelSummary`` shows each layer's input and output sizes from one
        forward of it, as Lightning's does."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, value: Any) -> None:
        self.__dict__["_example_input_array"] = value

    @property
    def logger(self) -> Any:
        """The Trainer's first logger (the Lite's, see :attr:`lite`), or ``None`` (outside a run as well).

        Under a Lite without loggers it raises ``IndexError``, as a LightningModule under Fabric does."""
        lite = self._lite_mode()
        if lite is not None:
            return lite.loggers[0]
        trainer = self.__dict__.get("_trainer")
        return trainer.logger if trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers (the Lite's, see :attr:`lite`; empty outside a run)."""
        lite = self._lite_mode()
        if lite is not None:
            return lite.loggers
        trainer = self.__dict__.get("_trainer")
        return list(trainer.loggers) if trainer is not None else []

    @property
    def global_rank(self) -> int:
        runner = self.__dict__.get("_trainer") or self._lite_mode()
        return runner.global_rank if runner is not None else 0

    @property
    def local_rank(self) -> int:
        runner = self.__dict__.get("_trainer") or self._lite_mode()
        return runner.local_rank if runner is not None else 0

    @property
    def current_epoch(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.current_epoch if trainer is not None else 0

    @property
    def global_step(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.global_step if trainer is not None else 0

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        sync_dist: bool = False,
        rank_zero_only: bool = False,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
        metric_attribute: str | None = None,
    ) -> None:
        """Record a metric: a number, a one-element tensor or a ``torchmetrics.Metric``.

        :param prog_bar: Show it in the progress bar.
        :param logger: Send it to the loggers.
        :param on_step: Keep each step's value (key suffixed ``_step`` when ``on_epoch`` is also set).
            Default: ``True`` in training batch hooks, ``False`` elsewhere.
        :param on_epoch: Aggregate it over the epoch (key suffixed ``_epoch`` when ``on_step`` is also set).
            Default: ``False`` in training batch hooks, ``True`` elsewhere.
        :param reduce_fx: How the epoch aggregate is made: ``"mean"`` (weighted by batch size), ``"sum"``,
            ``"max"`` or ``"min"`` (Lightning's ``"avg"``, any case, and ``torch.mean``/``sum``/``max``/``min``).
        :param sync_dist: Reduce across processes with the strategy (``Lite.all_reduce``): step values at
            once by ``reduce_fx``, epoch values once at the end of the epoch (weighted sums, so the mean is exact).
        :param rank_zero_only: The value is computed on global rank 0 only; other ranks ignore the call.
            It cannot be synchronised, and a callback on another rank cannot monitor it.
        :param batch_size: The weight of this value in an epoch mean; by default the size of the batch's first
            tensor.
        :param add_dataloader_idx: Suffix ``/dataloader_idx_N`` when there are several evaluation loaders.
        :param metric_attribute: The attribute that holds a logged ``torchmetrics.Metric``; found by default. A Metric
            must be an attribute of the Module (a submodule, as in Lightning): its state moves and is saved with it.
        """
        lite = self._lite_mode()
        if lite is not None:
            self._log_through_lite(lite, {name: value}, logger)
            return
        trainer = self.__dict__.get("_trainer")
        if trainer is None or not self.attached:
            _warn_once(f"{type(self).__qualname__}.log({name!r}) outside a Trainer run does nothing.")
            return
        if trainer.barebones:
            raise ConfigurationError(
                f"{type(self).__qualname__}.log({name!r}) under Trainer(barebones=True): barebones mode turns logging "
                f"off to measure the loop alone; remove the self.log calls or barebones=True."
            )
        if metric_attribute is None and _is_metric(value):
            self._check_metric_attribute(name, value)
        trainer.metric_store.log(
            name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, rank_zero_only, batch_size,
            add_dataloader_idx,
        )

    def _check_metric_attribute(self, name: str, metric: torch.nn.Module) -> None:
        """Refuse a logged Metric that is not a submodule (Lightning's rule, in its words)."""
        attributes = {id(module): attribute for attribute, module in self.named_modules() if _is_metric(module)}
        if not attributes:
            raise ConfigurationError(
                f"self.log({name!r}, <{type(metric).__name__}>): Could not find the `LightningModule` attribute for "
                f"the `torchmetrics.Metric` logged. You can fix this by setting an attribute for the metric in your "
                f"`LightningModule` (self.accuracy = Accuracy(...) in __init__), so that its state is moved, reset "
                f"and saved with the module."
            )
        if id(metric) not in attributes:
            raise ConfigurationError(
                f"self.log({name!r}, <{type(metric).__name__}>): Could not find the `LightningModule` attribute for "
                f"the `torchmetrics.Metric` logged. You can fix this by calling "
                f"`self.log({name}, ..., metric_attribute=name)` where `name` is one of "
                f"{list(attributes.values())}, or by logging one of those metrics."
            )

    def log_dict(self, dictionary: Mapping[str, Any], **kwargs: Any) -> None:
        """:meth:`log` every entry of ``dictionary`` with the same options (a ``MetricCollection`` too); under a
        :attr:`lite`, one ``lite.log_dict`` call."""
        lite = self._lite_mode()
        if lite is not None:
            self._log_through_lite(lite, dictionary, kwargs.get("logger", True))
            return
        for name, value in dictionary.items():
            self.log(name, value, **kwargs)

    def _log_through_lite(self, lite: Lite, dictionary: Mapping[str, Any], logger: bool | None) -> None:
        """Fabric's way (Lightning's rules and words): numbers and tensors only, at the loggers' own step."""
        if logger is False:  # no other destination than the loggers: nothing to do
            return
        if any(isinstance(value, Mapping) for value in dictionary.values()):
            raise ConfigurationError(
                f"`self.log_dict({dict(dictionary)})` was called, but nested dictionaries cannot be logged: log "
                f"each inner value under a name of its own."
            )
        for name, value in dictionary.items():
            if not isinstance(value, (numbers.Number, torch.Tensor)):
                raise ConfigurationError(
                    f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged: "
                    f"log numbers or tensors."
                )
        lite.log_dict(dictionary)

    def all_gather(self, data: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        """Gather a tensor (or a collection of them) from every process: shape ``(world_size, *shape)``."""
        lite = self._lite_mode() or self.trainer.lite
        return lite.all_gather(data, group=group, sync_grads=sync_grads)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.global_rank == 0:
            builtins.print(*args, **kwargs)

    def optimizers(self) -> Any:
        """The set-up optimizer, or a list when there are several (for manual optimization); under a :attr:`lite`,
        those set up with this module."""
        optimizers = self.__dict__["_lite_optimizers"] if self._lite_mode() is not None else self.trainer.optimizers
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def lr_schedulers(self) -> Any:
        """The learning-rate scheduler, a list when there are several, ``None`` without any."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward()`` through the strategy and precision, for manual optimization.

        As in Lightning, it runs the callbacks' and then this Module's ``on_before_backward``, the :meth:`backward`
        hook (extra arguments go to it), then the callbacks' and this Module's ``on_after_backward``.
        """
        lite = self._lite_mode()
        if lite is not None:
            lite.backward(loss, *args, **kwargs)
            return
        trainer = self.trainer
        for callback in trainer.callbacks:
            callback.on_before_backward(trainer, self, loss)
        self.on_before_backward(loss)
        self.backward(loss, *args, **kwargs)
        for callback in trainer.callbacks:
            callback.on_after_backward(trainer, self)
        self.on_after_backward()

    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients of ``optimizer``'s parameters by ``"norm"`` or ``"value"`` (Lightning's rules).

        Left out, each argument is the Trainer's ``gradient_clip_val`` (no clipping when unset) /
        ``gradient_clip_algorithm``; a value that contradicts a ``gradient_clip_val`` given to the Trainer is
        refused. Call it from :meth:`configure_gradient_clipping`, or in ``training_step`` under manual optimization.
        Under a :attr:`lite` it is ``lite.clip_gradients(self, optimizer, clip_val= / max_norm=)`` (``"norm"`` unless
        told otherwise).
        """
        lite = self._lite_mode()
        if lite is not None:
            if gradient_clip_val is None:
                return
            algorithm = str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm) or "norm").lower()
            if algorithm not in ("norm", "value"):
                raise ConfigurationError(
                    f"clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r}): the allowed algorithms "
                    f"are 'norm' and 'value'."
                )
            value = float(gradient_clip_val)
            lite.clip_gradients(self, optimizer, clip_val=value if algorithm == "value" else None,
                                max_norm=value if algorithm == "norm" else None)
            return
        config = self.trainer.config
        configured_val, configured_algorithm = config.gradient_clip_val, config.gradient_clip_algorithm
        if gradient_clip_val is None:
            gradient_clip_val = configured_val or 0.0
        elif configured_val is not None and configured_val != gradient_clip_val:
            raise ConfigurationError(
                f"You have set `Trainer(gradient_clip_val={configured_val!r})` and have passed "
                f"`clip_gradients(gradient_clip_val={gradient_clip_val!r})`. Please use only one of them: leave "
                f"gradient_clip_val out of the call to clip by the Trainer's value."
            )
        if gradient_clip_algorithm is None:
            gradient_clip_algorithm = configured_algorithm or "norm"
        else:
            gradient_clip_algorithm = str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm)).lower()
            if gradient_clip_algorithm not in ("norm", "value") or (
                    configured_val is not None and gradient_clip_algorithm != configured_algorithm):
                raise ConfigurationError(
                    f"You have set `Trainer(gradient_clip_algorithm={configured_algorithm!r})` and have passed "
                    f"`clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r})`: the allowed algorithms "
                    f"are 'norm' and 'value', and the Trainer's applies when it clips (gradient_clip_val=...). "
                    f"Please use only one of them."
                )
        if not isinstance(gradient_clip_val, (int, float)):
            raise TypeError(f"`gradient_clip_val` should be an int or a float. Got {gradient_clip_val!r}.")
        if gradient_clip_val <= 0:
            return
        self.trainer.clip_gradients(optimizer, float(gradient_clip_val), gradient_clip_algorithm)

    def configure_model(self) -> None:
        """Create the layers here instead of in ``__init__`` to have them created for the strategy.

        The Trainer calls it in every process before ``configure_optimizers`` of each fit, validate, test and
        predict: make it idempotent (return early when the layers exist), as in Lightning.
        """

    # -- freezing and optimizer toggling (Lightning's names) ------------------------------------------

    def freeze(self) -> Self:
        """No gradients for any parameter, and evaluation mode; returns the module (as Lightning's, for chaining)."""
        for parameter in self.parameters():
            parameter.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Self:
        """Gradients for every parameter again, and training mode; returns the module."""
        for parameter in self.parameters():
            parameter.requires_grad = True
        return self.train()

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require gradients until :meth:`untoggle_optimizer` (GAN-style loops).

        As in Lightning, the parameters of the run's other optimizers stop requiring gradients (their
        ``requires_grad`` is remembered for :meth:`untoggle_optimizer`); those of ``optimizer`` keep theirs, and a
        parameter no optimizer holds is left alone.
        """
        remembered: dict[torch.nn.Parameter, bool] = {}
        for other in self.trainer.optimizers:
            for group in other.param_groups:
                for parameter in group["params"]:
                    if parameter not in remembered:
                        remembered[parameter] = parameter.requires_grad
                        parameter.requires_grad = False
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                parameter.requires_grad = remembered.get(parameter, parameter.requires_grad)
        self.__dict__["_toggled"] = remembered

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the parameters of the run's other optimizers back the ``requires_grad`` :meth:`toggle_optimizer`
        remembered."""
        remembered: dict[torch.nn.Parameter, bool] = self.__dict__.pop("_toggled", {})
        for other in self.trainer.optimizers:
            if other is optimizer or getattr(other, "optimizer", None) is optimizer:
                continue
            for group in other.param_groups:
                for parameter in group["params"]:
                    if parameter in remembered:
                        parameter.requires_grad = remembered[parameter]

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the duration of a ``with`` block."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    # -- loading ------------------------------------------------------------------------------------

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | os.PathLike[str], map_location: Any = None,
        hparams_file: str | os.PathLike[str] | None = None, strict: bool = True, **kwargs: Any,
    ) -> Any:
        """A new module of this class built from a Trainer checkpoint: its saved hyperparameters (updated from
        ``hparams_file``, a logger's ``hparams.yaml`` / ``.json`` / tags ``.csv``, then overridden by ``kwargs``) go
        to ``__init__``, then the weights are loaded (Lightning's ``load_from_checkpoint``; ``strict=False`` loads
        what matches).

        The checkpoint is read with ``weights_only=True``: nothing in it can run code.
        """
        from core.toolkit.checkpoint import restore_state, safe_torch_load

        where = os.fspath(checkpoint_path)
        checkpoint = safe_torch_load(where, map_location if map_location is not None else "cpu", True)
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise CheckpointError(
                f"{where!r} is not a Trainer checkpoint (it has no 'state_dict'); load a Lite checkpoint with "
                f"Lite.load into a module you build yourself."
            )
        from_file = read_hparams_file(hparams_file) if hparams_file is not None else {}
        hyperparameters = {**dict(checkpoint.get("hyper_parameters") or {}), **from_file, **kwargs}
        try:
            module = cls(**hyperparameters)
        except TypeError as error:
            raise CheckpointError(
                f"{cls.__qualname__}(**hyperparameters) failed with the hyperparameters saved in {where!r} "
                f"({sorted(hyperparameters)}): {error}. Pass the missing arguments as keyword arguments."
            ) from error
        module.on_load_checkpoint(checkpoint)
        module.configure_model()
        restore_state({"state_dict": module}, {"state_dict": checkpoint["state_dict"]}, strict, where)
        return module

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_trainer"] = None  # a live trainer (its processes, files) does not travel with the module
        state.pop("_running", None)
        state.pop("_lite", None)  # nor a live Lite
        state.pop("_lite_optimizers", None)
        state.pop("_toggled", None)
        return state


class DataModule(_HyperparametersMixin):
    """The data of a run: download once, build datasets in every process, hand out DataLoaders.

    :attr prepare_data_per_node: ``True`` (default): :meth:`prepare_data` runs on local rank 0 of every
        node; ``False``: on global rank 0 only (shared storage).
    """

    prepare_data_per_node: bool = True

    def __init__(self) -> None:
        self.trainer: TrainerView | None = None

    def prepare_data(self) -> None:
        """Download or write to disk, once; the other processes wait (do not set state here)."""

    def setup(self, stage: str) -> None:
        """Build the datasets; called in every process at the start of fit / validate / test / predict."""

    def teardown(self, stage: str) -> None: ...

    def train_dataloader(self) -> Any:
        return None

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        return None

    def predict_dataloader(self) -> Any:
        return None

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A DataModule whose ``*_dataloader`` methods load the given datasets (Lightning's ``from_datasets``).

        A dataset may also be a list of datasets (several loaders) or, for training, a dict of them. The training
        loaders shuffle (unless the dataset is iterable). ``batch_size`` and ``num_workers`` are also passed to
        ``cls`` when its ``__init__`` takes them; ``datamodule_kwargs`` always are.
        """
        from torch.utils.data import DataLoader, IterableDataset

        def loader(dataset: Any, shuffle: bool = False) -> DataLoader[Any]:
            return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                              shuffle=shuffle and not isinstance(dataset, IterableDataset))

        def loaders(datasets: Any, shuffle: bool = False) -> Any:
            if isinstance(datasets, Mapping):
                return {key: loader(dataset, shuffle) for key, dataset in datasets.items()}
            if isinstance(datasets, Sequence):
                return [loader(dataset, shuffle) for dataset in datasets]
            return loader(datasets, shuffle)

        parameters = inspect.signature(cls.__init__).parameters
        takes_any = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values())
        special = {name: value for name, value in (("batch_size", batch_size), ("num_workers", num_workers))
                   if takes_any or name in parameters}
        datamodule = cls(**datamodule_kwargs, **special)
        given = (("train_dataloader", train_dataset, True), ("val_dataloader", val_dataset, False),
                 ("test_dataloader", test_dataset, False), ("predict_dataloader", predict_dataset, False))
        for name, datasets, shuffle in given:
            if datasets is not None:
                setattr(datamodule, name, lambda datasets=datasets, shuffle=shuffle: loaders(datasets, shuffle))
        return datamodule

    def state_dict(self) -> dict[str, Any]:
        """What to keep in checkpoints (tensors and plain values)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["trainer"] = None
        return state

    def __str__(self) -> str:
        """The data each ``*_dataloader`` hands out now, one line per stage (Lightning's format)::

            {Train dataloader: size=64}
            {Validation dataloader: 1. size=32 ; 2. size=NA}
            {Test dataloader: None}

        ``size`` is the length of a loader's dataset (``NA`` when it has none); ``None`` where the method gives no
        loader or raises (its datasets are not set up yet).
        """
        lines = []
        for title, method in (("Train dataloader", "train_dataloader"), ("Validation dataloader", "val_dataloader"),
                              ("Test dataloader", "test_dataloader"), ("Predict dataloader", "predict_dataloader")):
            try:
                described = _describe_loaders(getattr(self, method)())
            except Exception:
                described = "None"
            lines.append(f"{{{title}: {described}}}")
        return os.linesep.join(lines)


def _describe_loaders(found: Any) -> str:
    """``size=N`` for one loader (``NA`` without a length), ``1. size=N ; 2. ...`` for several, else ``None``."""
    from torch.utils.data import DataLoader

    def size(loader: Any) -> str:
        if not isinstance(loader, DataLoader):
            return "None"
        dataset = loader.dataset
        return f"size={len(dataset)}" if hasattr(dataset, "__len__") else "size=NA"

    if isinstance(found, DataLoader):
        return size(found)
    several = list(found.values()) if isinstance(found, Mapping) else found
    if isinstance(several, Sequence) and several:
        return " ; ".join(f"{index}. {described}" if described != "None" else "None"
                          for index, described in enumerate(map(size, several), start=1))
    return "None"


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, CoreWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------------------------
# The Trainer as a Module, a DataModule and a callback see it
# --------------------------------------------------------------------------------------------------------------


class MetricSink(Protocol):
    """Where ``Module.log`` records a value: the training store, or the running evaluation loop's."""

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
    ) -> None: ...


class TrainerView(Protocol):
    """The Trainer as its Module, DataModule and callbacks see it (see docs/trainer.md for each name)."""

    # What a callback may change during a run.
    should_stop: bool

    @property
    def accumulate_grad_batches(self) -> int: ...

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None: ...

    # The validated flags: ``core.trainer.TrainerConfig``, which this layer cannot name. A callback that changes
    # a flag for the rest of a run (StochasticWeightAveraging's extra epoch) assigns an evolved copy.
    config: Any

    @property
    def max_epochs(self) -> int: ...

    @property
    def max_steps(self) -> int: ...

    @property
    def log_every_n_steps(self) -> int: ...

    @property
    def default_root_dir(self) -> str: ...

    @property
    def default_checkpoint_dir(self) -> str: ...

    @property
    def barebones(self) -> bool: ...

    # Where the run is.
    @property
    def state(self) -> str | None: ...

    @property
    def sanity_checking(self) -> bool: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def batches_done(self) -> int: ...

    @property
    def num_training_batches(self) -> float: ...

    @property
    def estimated_stepping_batches(self) -> float: ...

    @property
    def num_val_batches(self) -> list[float]: ...

    @property
    def filler_batch(self) -> bool: ...

    # The processes.
    @property
    def lite(self) -> Lite: ...

    @property
    def global_rank(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    # What the run holds.
    @property
    def model(self) -> Module | None: ...

    @property
    def datamodule(self) -> DataModule | None: ...

    @property
    def step_module(self) -> torch.nn.Module | None: ...

    @property
    def optimizers(self) -> list[Any]: ...

    @property
    def lr_scheduler_configs(self) -> list[SchedulerConfig]: ...

    @property
    def callbacks(self) -> Sequence[Any]: ...  # core.callbacks.Callback objects, a layer above this one

    @property
    def loggers(self) -> list[Logger]: ...

    @property
    def logger(self) -> Logger | None: ...

    @property
    def log_dir(self) -> str: ...

    # Metrics.
    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def progress_bar_metrics(self) -> dict[str, float]: ...

    @property
    def metric_store(self) -> MetricSink: ...

    # The predict loop's batch indices, for prediction writers.
    @property
    def predictions(self) -> list[list[Any]]: ...

    @property
    def predict_batch_indices(self) -> list[int] | None: ...

    @property
    def predict_epoch_batch_indices(self) -> list[list[list[int]]]: ...

    # Actions.
    def save_checkpoint(self, filepath: str | os.PathLike[str], weights_only: bool = False) -> None: ...

    def remove_checkpoint(self, filepath: str | os.PathLike[str]) -> None: ...

    def log_to_loggers(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def clip_gradients(self, optimizer: Any, value: float, algorithm: str) -> None: ...

    def print(self, *args: Any, **kwargs: Any) -> None: ...
