"""``Trainer``: the whole training loop for a :class:`core.Module`, on any resolved active set, through ``Lite``.

The Trainer owns no path to the hardware: every entry point (``fit``, ``validate``, ``test``, ``predict``)
launches a :class:`core.Lite` run with the same settings and drives the loops through it (setup, data
splitting, backward, gradient sync, collectives, checkpoints). So every strategy and precision that works
with ``Lite`` works with the Trainer.

Reading order: this module (flags, the public API and what a run exposes); ``core.trainer._run`` (one run:
setup, restore, teardown); ``core.trainer._loops`` (fit) and ``core.trainer._eval`` (validate, test,
predict); ``core.trainer._checkpoint`` (the checkpoint); ``core.trainer._logging`` (``self.log``).
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreError
from core.callbacks import Callback, EarlyStopping, ModelCheckpoint, ProgressBar
from core.callbacks._callback import CallbackHooks
from core.callbacks.model_summary import ModelSummary
from core.callbacks.progress import default_progress_bar
from core.callbacks.timer import Timer
from core.lite import Lite
from core.loggers import CSVLogger, DummyLogger, Logger
from core.module import DataModule, Module
from core.module._optimizers import SchedulerConfig
from core.profilers import PassThroughProfiler, Profiler, profiler_from
from core.trainer._checkpoint import check_ckpt_path, saved_checkpoint_state
from core.trainer._config import TrainerConfig, check_sync_batchnorm
from core.trainer._flags import (
    CLIP_ALGORITHMS,
    FLAGS,
    ArgumentTypeError,
    FlagView,
    barebones_conflicts,
    flags_of,
    refuse_barebones_conflicts,
)
from core.trainer._logging import MetricStore
from core.trainer._stages import EVAL_LOOP_OF_STAGE
from core.trainer._state import RunState

__all__ = ["Trainer"]



class NoModelAttachedError(CoreError, AttributeError):
    """What needs the Trainer's model was asked of a Trainer that has none (``save_checkpoint`` before any run):
    a :class:`core.CoreError` that is also the ``AttributeError`` Lightning raises there."""


def _callback_list(callbacks: object) -> list[Any]:
    return [callbacks] if isinstance(callbacks, Callback) else list(callbacks or [])  # type: ignore[call-overload]


def _as_loggers(logger: object, default: Callable[[], list[Logger]]) -> list[Logger]:
    if logger is True:
        return default()
    if logger is False or logger is None:
        return []
    given = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    loggers = [item for item in given if isinstance(item, Logger)]
    if len(loggers) != len(given):
        bad = next(item for item in given if not isinstance(item, Logger))
        raise ConfigurationError(f"logger={bad!r}: expected True, False, a core.loggers.Logger or a list of them.")
    return loggers


class Trainer:
    """Train, validate, test and predict with a :class:`core.Module`, on any installed hardware plugins.

    Each flag is declared once, in the Trainer's table of flags (its type, default, check and meaning); this
    signature, the read-only views of the loop flags (``trainer.max_epochs``, ...), ``TrainerConfig``'s fields, the
    table of docs/trainer-flags.md ("Trainer flags") and the parameter lines below are generated from it.
    """

    def __init__(
        self,
        # <generated: signature> by scripts/gen_trainer_flags.py from FLAGS (core/trainer/_flags.py): `make flags`
        accelerator: object = "auto",
        strategy: object = "auto",
        devices: object = "auto",
        num_nodes: int = 1,
        precision: object = None,
        plugins: object = None,
        logger: object = None,
        callbacks: Callback | Sequence[Callback] | None = None,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        log_every_n_steps: int | None = None,
        deterministic: bool = False,
        inference_mode: bool = True,
        fast_dev_run: int | bool = False,
        max_time: object = None,
        overfit_batches: int | float = 0.0,
        benchmark: bool | None = None,
        use_distributed_sampler: bool = True,
        detect_anomaly: bool = False,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        barebones: bool = False,
        profiler: object = None,
        enable_autolog_hparams: bool = True,
        # </generated: signature>
    ) -> None:
        given = dict(locals())  # every flag by name; its declaration in FLAGS says where it goes
        self._lite_settings: dict[str, Any] = {flag.name: given[flag.name] for flag in flags_of("lite")}
        # Resolve now, so that a bad flag fails here and not at fit(); each run launches a fresh Lite.
        lite = Lite(**self._lite_settings)
        self._lite_used = False
        self.config = TrainerConfig.from_flags(**{flag.name: given[flag.name] for flag in flags_of("loop")})
        if sync_batchnorm and lite.active.config.accelerator == "cpu":
            check_sync_batchnorm(lite.active.config.world_size, "cpu")  # before any process starts
        if barebones:
            refuse_barebones_conflicts(barebones_conflicts(given, "trainer"))
            logger, enable_checkpointing, enable_progress_bar, enable_model_summary = False, False, False, False
        logger = True if logger is None else logger
        enable_checkpointing = True if enable_checkpointing is None else enable_checkpointing
        enable_progress_bar = True if enable_progress_bar is None else enable_progress_bar
        enable_model_summary = True if enable_model_summary is None else enable_model_summary
        if self.config.fast_dev_run:  # Lightning's semantics (the loop flags are set in the config): nothing written
            enable_checkpointing = False
            callbacks = [kept for kept in _callback_list(callbacks) if not isinstance(kept, ModelCheckpoint)]
        if max_time is not None and not any(isinstance(c, Timer) for c in _callback_list(callbacks)):
            callbacks = [*_callback_list(callbacks), Timer(duration=max_time, interval="step", verbose=True)]
        # None: nothing in the loop is wrapped (PassThroughProfiler is only what trainer.profiler reads then).
        self.active_profiler: Profiler | None = profiler_from(profiler)
        self.profiler: Profiler = self.active_profiler or PassThroughProfiler()
        self.loggers: list[Logger] = _as_loggers(logger, self.default_loggers)
        if self.config.fast_dev_run and self.loggers:  # as Lightning: code that logs runs, nothing is recorded
            self.loggers = [DummyLogger()]
        if enable_model_summary and not any(isinstance(c, ModelSummary) for c in _callback_list(callbacks)):
            callbacks = [*_callback_list(callbacks), ModelSummary()]
        self.callbacks: list[Callback] = self._arrange_callbacks(callbacks, enable_checkpointing, enable_progress_bar)

        # What a run sets; readable by callbacks and the Module while it runs, and after it.
        self.module: Module | None = None
        self.datamodule: DataModule | None = None
        self.state: str | None = None  # "fit", "validate", "test", "predict" while running
        self.sanity_checking = False
        self.should_stop = False
        self.optimizers: list[Any] = []
        self.lr_scheduler_configs: list[SchedulerConfig] = []
        self.num_training_batches: float = 0
        self.num_val_batches: list[float] = []
        self.num_test_batches: list[float] = []
        self.num_predict_batches: list[float] = []
        # The explicit interface between the Trainer, its loops and the Module (see core/trainer/_state.py).
        self.run_state = RunState(lite=lite, hooks=CallbackHooks(self.callbacks))

    # ---------------------------------------------------------------------------------------------
    # Flags
    # ---------------------------------------------------------------------------------------------

    # The flags, read-only: set them when constructing the Trainer (``trainer.config`` holds them all).

    @property
    def lite_settings(self) -> dict[str, Any]:
        """The settings each run of this Trainer gives ``Lite`` (accelerator, strategy, devices, num_nodes,
        precision, plugins), as passed; a copy (the Tuner builds its trial Trainers from it)."""
        return dict(self._lite_settings)

    # <generated: views> by scripts/gen_trainer_flags.py from FLAGS (core/trainer/_flags.py): `make flags`
    default_root_dir: FlagView[str] = FlagView()
    max_epochs: FlagView[int] = FlagView()
    min_epochs: FlagView[int] = FlagView()
    max_steps: FlagView[int] = FlagView()
    min_steps: FlagView[int] = FlagView()
    val_check_interval: FlagView[int | float] = FlagView()
    check_val_every_n_epoch: FlagView[int | None] = FlagView()
    limit_train_batches: FlagView[int | float] = FlagView()
    limit_val_batches: FlagView[int | float] = FlagView()
    limit_test_batches: FlagView[int | float] = FlagView()
    limit_predict_batches: FlagView[int | float] = FlagView()
    num_sanity_val_steps: FlagView[int] = FlagView()
    gradient_clip_val: FlagView[float | None] = FlagView()
    gradient_clip_algorithm: FlagView[str] = FlagView()
    log_every_n_steps: FlagView[int] = FlagView()
    deterministic: FlagView[bool] = FlagView()
    inference_mode: FlagView[bool] = FlagView()
    fast_dev_run: FlagView[int] = FlagView()
    overfit_batches: FlagView[int | float] = FlagView()
    benchmark: FlagView[bool | None] = FlagView()
    use_distributed_sampler: FlagView[bool] = FlagView()
    detect_anomaly: FlagView[bool] = FlagView()
    sync_batchnorm: FlagView[bool] = FlagView()
    reload_dataloaders_every_n_epochs: FlagView[int] = FlagView()
    barebones: FlagView[bool] = FlagView()
    enable_autolog_hparams: FlagView[bool] = FlagView()
    # </generated: views>

    # ---------------------------------------------------------------------------------------------
    # Output layout: the two places a subclass may change (core.lightning's Trainer uses Lightning's)
    # ---------------------------------------------------------------------------------------------

    def default_loggers(self) -> list[Logger]:
        """The loggers of ``logger=True`` (the default): a :class:`~core.loggers.CSVLogger` writing to
        ``<default_root_dir>/logs/version_<n>``, which needs no extra package."""
        return [CSVLogger(self.default_root_dir)]

    @property
    def default_checkpoint_dir(self) -> str:
        """Where a ``ModelCheckpoint`` without ``dirpath`` writes: ``<default_root_dir>/checkpoints``."""
        return os.path.join(self.default_root_dir, "checkpoints")

    @property
    def accumulate_grad_batches(self) -> int:
        """The flag, or what a ``GradientAccumulationScheduler`` set for the current epoch."""
        scheduled = self.run_state.accumulate_grad_batches
        return self.config.accumulate_grad_batches if scheduled is None else scheduled

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        # Lightning's GradientAccumulationScheduler sets it at each epoch start; it applies from the next batch.
        if not is_whole(value, 1):
            raise ConfigurationError(f"trainer.accumulate_grad_batches = {value!r}: expected a whole number >= 1.")
        self.run_state.accumulate_grad_batches = value

    def _arrange_callbacks(
        self, given: Callback | Sequence[Callback] | None, checkpointing: bool, progress_bar: bool
    ) -> list[Callback]:
        """The callbacks in calling order: yours, a progress bar, then early stopping and checkpoints last."""
        callbacks = [given] if isinstance(given, Callback) else list(given or [])
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise ConfigurationError(
                    f"callbacks=[..., {callback!r}, ...]: expected core.callbacks.Callback objects."
                )
        has_checkpoint = any(isinstance(callback, ModelCheckpoint) for callback in callbacks)
        bars = [type(callback).__name__ for callback in callbacks if isinstance(callback, ProgressBar)]
        if len(bars) > 1:
            raise ConfigurationError(
                f"callbacks hold {len(bars)} progress bars ({', '.join(bars)}); one draws the progress: keep one."
            )
        has_progress_bar = bool(bars)
        if has_checkpoint and not checkpointing:
            raise ConfigurationError(
                "Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in callbacks "
                "list; drop one (enable_checkpointing=False turns checkpointing off)."
            )
        if has_progress_bar and not progress_bar:
            raise ConfigurationError("A ProgressBar is in callbacks but enable_progress_bar=False; drop one.")
        if checkpointing and not has_checkpoint:
            callbacks.append(ModelCheckpoint())
        if progress_bar and not has_progress_bar:
            callbacks.append(default_progress_bar())
        # only callbacks with a state go into checkpoints (Lightning's rule): two stateless ones may share a class
        stateful = [callback for callback in callbacks if type(callback).state_dict is not Callback.state_dict]
        keys = [callback.state_key for callback in stateful]
        duplicates = sorted({key for key in keys if keys.count(key) > 1})
        if duplicates:
            raise ConfigurationError(
                f"Several callbacks with a state share the state key(s) {duplicates}, so checkpoints could not tell "
                f"their states apart; give them different settings (for ModelCheckpoint: monitor, mode or its "
                f"schedule, every_n_epochs / every_n_train_steps / train_time_interval)."
            )

        def order(callback: Callback) -> int:
            return 2 if isinstance(callback, ModelCheckpoint) else 1 if isinstance(callback, EarlyStopping) else 0

        return sorted(callbacks, key=order)  # stable: your order within each group

    # ---------------------------------------------------------------------------------------------
    # Entry points
    # ---------------------------------------------------------------------------------------------

    def fit(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> None:
        """Train ``model``; with ``ckpt_path`` (a path, ``"last"`` or ``"best"``) resume where that checkpoint was.

        Data comes from the arguments, else the DataModule, else the Module's ``*_dataloader`` methods.
        """
        if isinstance(train_dataloaders, DataModule):
            if datamodule is not None:
                raise ConfigurationError("fit() got a DataModule as train_dataloaders and another as datamodule.")
            train_dataloaders, datamodule = None, train_dataloaders
        check_ckpt_path(ckpt_path)
        self._launch("fit", model, datamodule, {"train": train_dataloaders, "val": val_dataloaders}, ckpt_path)

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run the validation loop once; returns one dict of epoch metrics per validation loader."""
        results: list[dict[str, float]] = self._evaluate("validate", model, dataloaders, ckpt_path, datamodule)
        return results

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        datamodule: DataModule | None = None,
    ) -> list[dict[str, float]]:
        """Run the test loop once; returns one dict of epoch metrics per test loader."""
        results: list[dict[str, float]] = self._evaluate("test", model, dataloaders, ckpt_path, datamodule)
        return results

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool = True,
        ckpt_path: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Run ``predict_step`` over the data; returns global rank 0's predictions (a list per loader)."""
        result = self._evaluate("predict", model, dataloaders, ckpt_path, datamodule)
        return result if return_predictions else None

    def _evaluate(
        self, stage: str, model: Module | None, dataloaders: Any, ckpt_path: Any, datamodule: DataModule | None,
    ) -> Any:
        if isinstance(dataloaders, DataModule):
            dataloaders, datamodule = None, dataloaders
        check_ckpt_path(ckpt_path)
        chosen = model if model is not None else self.module
        if chosen is None:
            raise ArgumentTypeError(
                f"`Trainer.{stage}()` requires a `LightningModule` (a core.Module) when it hasn't been passed in a "
                f"previous run: trainer.{stage}(model, ...), or call fit(model) first."
            )
        if datamodule is None and dataloaders is None:
            datamodule = self.datamodule
        return self._launch(stage, chosen, datamodule, {EVAL_LOOP_OF_STAGE[stage].data: dataloaders}, ckpt_path)

    def _launch(
        self, stage: str, model: Module, datamodule: DataModule | None, loaders: dict[str, Any], ckpt_path: Any
    ) -> Any:
        from core.trainer._run import Outcome, check_eval_step, run_stage

        if not isinstance(model, Module):
            raise ArgumentTypeError(
                f"`model` must be a `LightningModule` (a core.Module) for trainer.{stage}(), "
                f"got `{type(model).__qualname__}`."
            )
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise ConfigurationError(f"datamodule={datamodule!r}: expected a core.DataModule.")
        check_eval_step(stage, model)
        if self.state:  # a run's name while one runs (the Lightning Trainer's state object is falsy when idle)
            raise CoreError(f"trainer.{stage}() was called while trainer.{self.state}() is running.")
        lite = self.run_state.lite if not self._lite_used else Lite(**self._lite_settings)
        self.run_state.lite, self._lite_used = lite, True
        self.module, self.datamodule = model, datamodule
        self.run_state.finished_fit = None
        outcome = lite.launch(run_stage, self, stage, model, datamodule, loaders, ckpt_path, os.getpid())
        spawned = isinstance(outcome, Outcome)  # the run happened in other processes (ddp_spawn)
        if stage == "fit":
            self.run_state.finished_fit = "elsewhere" if spawned else "here"
            self.run_state.fit_precision_state = None if spawned else lite._hooks.precision_state_dict()
        return outcome.apply(self, model) if spawned else outcome

    # ---------------------------------------------------------------------------------------------
    # What a run exposes
    # ---------------------------------------------------------------------------------------------

    @property
    def lite(self) -> Lite:
        """The Lite of the current (or latest) run: devices, ranks and collectives."""
        return self.run_state.lite

    def attached_module(self) -> Module:
        """The Module of the run in progress; raises outside a run."""
        if self.module is None:
            raise CoreError("The Trainer has no Module attached: this is only available during fit / validate / test.")
        return self.module

    @property
    def model(self) -> Module | None:
        """The Module given to the latest entry point."""
        return self.module

    @property
    def global_rank(self) -> int:
        return self.run_state.lite.global_rank

    @property
    def local_rank(self) -> int:
        return self.run_state.lite.local_rank

    @property
    def node_rank(self) -> int:
        return self.run_state.lite.node_rank

    @property
    def world_size(self) -> int:
        return self.run_state.lite.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.run_state.lite.is_global_zero

    @property
    def current_epoch(self) -> int:
        """The epoch being trained (0-based); after fit, the number of epochs completed."""
        return self.run_state.progress.epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken since training started (restored from checkpoints)."""
        return self.run_state.progress.global_step

    @property
    def batches_done(self) -> int:
        """Training batches finished in the current epoch (counting those a resumed run already ran)."""
        return self.run_state.progress.batches_done

    @property
    def training(self) -> bool:
        return self.state == "fit" and not self.sanity_checking

    @property
    def validating(self) -> bool:
        evaluating_in_fit = self.state == "fit" and self.run_state.metrics is not self.run_state.train_metrics
        return self.state == "validate" or evaluating_in_fit

    @property
    def testing(self) -> bool:
        return self.state == "test"

    @property
    def predicting(self) -> bool:
        return self.state == "predict"

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Every logged value by name: epoch values once computed, and the latest step values."""
        metrics = dict(self.run_state.callback_metrics)
        store = self.run_state.train_metrics
        for name, value in store.latest_step_values().items():
            metrics[name] = value if isinstance(value, torch.Tensor) else torch.tensor(value)
        for name in store.forked_names():  # before its first epoch value: the latest step value
            step_key = f"{name}_step"
            if name not in metrics and step_key in metrics:
                metrics[name] = metrics[step_key]
        return metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of everything logged for the loggers, as tensors (Lightning's type): what was sent, and
        the latest training step values, also of the steps between two logging steps (as in Lightning)."""
        metrics = {name: torch.tensor(value) for name, value in self.run_state.logged_metrics.items()}
        for name, value in self.run_state.train_metrics.latest_step_values(for_logger=True).items():
            metrics[name] = value if isinstance(value, torch.Tensor) else torch.tensor(value)
        return metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The values logged with ``prog_bar=True``, as numbers (converted when read)."""
        if self.state in ("validate", "test"):
            names = self.run_state.metrics.prog_bar_names()  # this evaluation's values only
        else:
            names = self.run_state.train_metrics.prog_bar_names() | self.run_state.prog_bar_names
        values = {name: float(value) for name, value in self.callback_metrics.items() if name in names}
        return {**values, **self.run_state.eval_step_bar}  # evaluation step values: no callback metrics

    @property
    def logger(self) -> Logger | None:
        """The first logger, or ``None``."""
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        """The first logger's directory, or ``default_root_dir`` without a logger."""
        return self.loggers[0].log_dir if self.loggers else self.default_root_dir

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [callback for callback in self.callbacks if isinstance(callback, ModelCheckpoint)]

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None:
        callbacks = self.checkpoint_callbacks
        return callbacks[0] if callbacks else None

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        return next((callback for callback in self.callbacks if isinstance(callback, EarlyStopping)), None)

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        return next((callback for callback in self.callbacks if isinstance(callback, ProgressBar)), None)

    def _loaders(self, key: str) -> Any:
        loaders = self.run_state.dataloaders.get(key)
        if not loaders:
            return None
        return loaders[0] if len(loaders) == 1 else list(loaders)

    @property
    def train_dataloader(self) -> Any:
        """The training DataLoader of the latest ``fit`` as its loop reads it (the strategy's sampler in it), or
        ``None`` before one."""
        return self._loaders("train")

    @property
    def val_dataloaders(self) -> Any:
        """The validation DataLoader of the latest ``fit`` / ``validate`` as the loop reads it (a list when there are
        several), or ``None``."""
        return self._loaders("val")

    @property
    def test_dataloaders(self) -> Any:
        """The test DataLoader(s) of the latest ``test``, as for :attr:`val_dataloaders`."""
        return self._loaders("test")

    @property
    def predict_dataloaders(self) -> Any:
        """The predict DataLoader(s) of the latest ``predict``, as for :attr:`val_dataloaders`."""
        return self._loaders("predict")

    @property
    def estimated_stepping_batches(self) -> float:
        """How many optimizer steps fit() will take at most (for schedulers such as OneCycleLR)."""
        per_epoch = self.num_training_batches / self.accumulate_grad_batches
        per_epoch = float(int(per_epoch) + (per_epoch % 1 > 0))
        by_epochs = per_epoch * self.max_epochs if self.max_epochs != -1 else float("inf")
        return by_epochs if self.max_steps == -1 else min(by_epochs, float(self.max_steps))

    # ---------------------------------------------------------------------------------------------
    # Actions available during a run
    # ---------------------------------------------------------------------------------------------

    def save_checkpoint(self, filepath: str | os.PathLike[str], weights_only: bool = False) -> None:
        """Write a checkpoint of the current run, or of the ``fit`` that has just returned: call it on every rank
        (the strategy picks the writers).

        After ``fit`` (Lightning's usual way to keep the final state) the checkpoint holds the final weights,
        optimizers, loop position and callbacks, and resumes with ``fit(..., ckpt_path=filepath)``; it is written
        through a short run with the same settings (the fit's processes and process group are gone by then).
        The content is documented in docs/trainer-checkpoints.md; ``weights_only`` keeps the weights
        and hyperparameters only.
        """
        if self.module is not None and not self.state and self.run_state.finished_fit == "here":
            self._save_after_fit(filepath, weights_only)
            return
        if self.module is None:
            raise NoModelAttachedError(
                "Saving a checkpoint is only possible if a model is attached to the Trainer: save_checkpoint() "
                "writes the state of a running fit/validate/test, or of a fit that has returned; call it during a "
                "run or after fit(model)."
            )
        if not self.state:
            if self.run_state.finished_fit == "elsewhere":
                raise CoreError(
                    "save_checkpoint() after a ddp_spawn fit: the run's optimizers lived in its processes, which are "
                    "gone; save during the run (a ModelCheckpoint, or trainer.save_checkpoint in a callback's "
                    "on_train_end), or use strategy='ddp'."
                )
            raise CoreError(
                "save_checkpoint() writes the state of a running fit/validate/test, or of a fit that has returned; "
                "call it during a run or after fit()."
            )
        self.run_state.lite.save(filepath, saved_checkpoint_state(self, weights_only=weights_only))

    def _save_after_fit(self, filepath: str | os.PathLike[str], weights_only: bool) -> None:
        from core.trainer._run import save_after_fit

        lite = Lite(**self._lite_settings)
        self.run_state.lite, self._lite_used = lite, True
        lite.launch(save_after_fit, self, self.attached_module(), os.fspath(filepath), weights_only)

    def remove_checkpoint(self, filepath: str | os.PathLike[str]) -> None:
        """Delete a checkpoint written by :meth:`save_checkpoint` (``Lite.remove_checkpoint``: rank 0 deletes)."""
        self.run_state.lite.remove_checkpoint(filepath)

    def logger_step(self) -> int:
        """The step the loggers get by default, counted as Lightning counts it.

        During fit: the number of training batches that stepped the optimizers before the latest one, so the values
        of a batch go under its index among them (0, 1, ...), and epoch-end and validation values under the latest
        batch's; with manual optimization every batch counts, whatever the number of ``optimizer.step()`` calls.
        Outside fit: the global step (the count after the fit that trained the weights).
        """
        if self.state != "fit":
            return self.global_step
        at_batch = self.run_state.batch_logger_step
        return at_batch if at_batch is not None else max(self.global_step - 1, 0)

    def log_to_loggers(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Send ``metrics`` to every logger at ``step`` (default: :meth:`logger_step`), from global rank 0.

        The loggers also get the current epoch as ``epoch`` when no ``step`` is given, unless a value named ``step``
        was logged: that value is then the loggers' step (Lightning's rules). Call it on every rank (it only records
        elsewhere).
        """
        self.run_state.logged_metrics.update(metrics)
        if step is None and "step" in metrics:  # self.log("step", n) chooses the loggers' step, as in Lightning
            metrics = dict(metrics)
            step = int(metrics.pop("step"))
        elif step is None:  # for the loggers only, as Lightning: logged_metrics holds what was logged
            metrics = {**metrics, "epoch": self.current_epoch}
        if self.is_global_zero:
            at = self.logger_step() if step is None else step
            for logger in self.loggers:
                logger.log_metrics(metrics=metrics, step=at)

    def record_epoch_values(self, values: dict[str, float], store: MetricStore, log: bool) -> None:
        """Epoch values become callback metrics; with ``log``, those logged with ``logger=True`` go to the loggers.

        Called by the loops at the end of each epoch (and of each evaluation) with the epoch's reduced values.
        """
        for name, value in values.items():  # tensors of the default dtype (float32), as Lightning's
            self.run_state.callback_metrics[name] = torch.tensor(value)
        for name, key in store.forked_names().items():  # on_step and on_epoch: the bare name is the epoch value
            if key in values:
                self.run_state.callback_metrics[name] = torch.tensor(values[key])
        self.run_state.prog_bar_names |= store.prog_bar_names()
        if not log:
            return
        to_loggers = store.logger_names()
        logged = {name: value for name, value in values.items() if name in to_loggers}
        if logged:
            self.log_to_loggers(logged)

    @property
    def step_module(self) -> torch.nn.Module | None:
        """The set-up module whose forward runs the Module's step methods (``None`` outside a run)."""
        step_module: torch.nn.Module | None = self.run_state.step_module
        return step_module

    @property
    def metric_store(self) -> MetricStore:
        """Where ``Module.log`` records now: the training store, or the running evaluation loop's."""
        return self.run_state.metrics

    @property
    def predictions(self) -> list[list[Any]]:
        """The predict loop's outputs so far, per loader."""
        return self.run_state.predictions

    @property
    def predict_batch_indices(self) -> list[int] | None:
        """The dataset indices of the batch being predicted (``None``: unknown)."""
        return self.run_state.predict_batch_indices

    @property
    def predict_epoch_batch_indices(self) -> list[list[list[int]]]:
        """Per predict loader, the dataset indices of each batch predicted so far."""
        return self.run_state.predict_epoch_batch_indices

    @property
    def filler_batch(self) -> bool:
        """Whether the evaluation batch being run is a filler (docs/trainer-logging.md): skip it in your own tallies."""
        return self.run_state.metrics.filler

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.is_global_zero:
            builtins.print(*args, **kwargs)

    def clip_gradients(self, optimizer: Any, value: float, algorithm: str) -> None:
        """Clip the gradients of the running module's parameters in ``optimizer`` by ``"norm"`` or ``"value"``."""
        if algorithm not in CLIP_ALGORITHMS:
            raise ConfigurationError(f"gradient_clip_algorithm={algorithm!r}: expected 'norm' or 'value'.")
        module = self.module
        if module is None:
            raise CoreError("Gradients can be clipped only during a run.")
        if algorithm == "norm":
            self.run_state.lite.clip_gradients(module, optimizer, max_norm=value, error_if_nonfinite=False)
        else:
            self.run_state.lite.clip_gradients(module, optimizer, clip_val=value)

    def __getstate__(self) -> dict[str, Any]:
        # Sent to the processes of ddp_spawn with the model: no run state, no reference to the model itself.
        state = self.__dict__.copy()
        state["module"] = None
        state["datamodule"] = None
        state["run_state"] = attrs.evolve(self.run_state, step_module=None, dataloaders={})
        state["optimizers"] = []
        state["lr_scheduler_configs"] = []
        return state

    def __repr__(self) -> str:
        return f"<Trainer state={self.state}\n{self.run_state.lite.active.config.summary()}>"


# help(Trainer) lists every flag with the line the docs show, from the one declaration.
Trainer.__doc__ = (Trainer.__doc__ or "") + "".join(
    f"    :param {flag.name}: {flag.doc}\n" for flag in FLAGS
)
