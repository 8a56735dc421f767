"""``lightning.pytorch.Trainer``: core's Trainer with Lightning's output layout.

Lightning's ``logger=True`` is a ``TensorBoardLogger`` when tensorboard is importable (a ``CSVLogger`` otherwise),
named ``lightning_logs``, and a ``ModelCheckpoint`` without ``dirpath`` writes into the first logger's run directory,
so one run's files sit together: ``<default_root_dir>/lightning_logs/version_<n>/{checkpoints/, hparams.yaml,
events.out.tfevents.*}``. core's own Trainer keeps ``logs/version_<n>`` and ``<default_root_dir>/checkpoints``
(docs/migrating-from-lightning.md says why).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import sys
import warnings
from collections.abc import Generator
from typing import Any, Final

from core._errors import ConfigurationError, CoreWarning
from core.callbacks import EarlyStopping, Timer
from core.lightning._bases import StrategyView
from core.lightning._compat import RunningStage, TrainerFn, TrainerState, TrainerStatus
from core.lightning._loggers import CSVLogger, TensorBoardLogger
from core.lightning._rank_zero import rank_zero_info, rank_zero_warn
from core.loggers import Logger
from core.loggers.tensorboard import tensorboard_available
from core.trainer import Trainer as _CoreTrainer

__all__ = ["Trainer"]


def _flags_from_environment(class_name: str) -> dict[str, Any]:
    """``PL_TRAINER_<FLAG>`` variables, as Lightning's ``_parse_env_variables`` reads them: a Python literal where
    the value is one (``2``, ``0.5``, ``True``), else the string."""
    found: dict[str, Any] = {}
    for name in inspect.signature(_CoreTrainer).parameters:
        value: Any = os.environ.get(f"PL_{class_name.upper()}_{name.upper()}")
        if value:
            with contextlib.suppress(ValueError, SyntaxError):
                value = ast.literal_eval(value)
            found[name] = value
    return found


_ONE_BATCH: Final = {"limit_train_batches": "1 batch per epoch will be used",
                     "val_check_interval": "validation will run after every batch"}
_ALL_BATCHES: Final = {"limit_train_batches": "100% of the batches per epoch will be used",
                       "val_check_interval": "validation will run at the end of the training epoch"}


def _announce_whole_or_all(flags: dict[str, Any]) -> None:
    """Lightning's INFO line for a batch flag given as ``1`` or ``1.0``, whose meanings (one batch, all batches)
    differ only by type: ``Trainer(limit_val_batches=1)` was configured so 1 batch will be used.``. As in
    Lightning's ``_init_debugging_flags``, flags that ``fast_dev_run`` or ``overfit_batches`` replace say nothing."""
    names = ["overfit_batches"]
    if not flags.get("fast_dev_run"):
        if not flags.get("overfit_batches"):
            names += ["limit_train_batches", "limit_val_batches"]
        names += ["limit_test_batches", "limit_predict_batches", "val_check_interval"]
    for name in names:
        value = flags.get(name)
        if type(value) is int and value == 1:
            rank_zero_info(f"`Trainer({name}=1)` was configured so {_ONE_BATCH.get(name, '1 batch will be used')}.")
        elif type(value) is float and value == 1.0:
            message = _ALL_BATCHES.get(name, "100% of the batches will be used")
            rank_zero_info(f"`Trainer({name}=1.0)` was configured so {message}.")


_STAGE_OF_FN = {"fit": RunningStage.TRAINING, "validate": RunningStage.VALIDATING, "test": RunningStage.TESTING,
                 "predict": RunningStage.PREDICTING}


class _LiveState(TrainerState):
    """Lightning's ``TrainerState``, also read by core's Trainer, which keeps its run's name in ``state``: it equals
    the running entry point's name (``state == "fit"``) and is false when no entry point runs."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.status == TrainerStatus.RUNNING and self.fn == other
        if isinstance(other, TrainerState):  # Lightning's own or this one: equal when the fields are
            return (self.status, self.fn, self.stage) == (other.status, other.fn, other.stage)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return self.status == TrainerStatus.RUNNING


LIGHTNING_READS: Final = frozenset({"strategy", "num_sanity_val_steps", "max_epochs"})
"""Flags whose value the Lightning Trainer reads back as Lightning does: ``trainer.strategy`` is the strategy (not the
flag's alias), ``num_sanity_val_steps=-1`` reads as ``inf`` and ``max_epochs=None`` as ``None`` until ``fit``. It
declares no flag: each still goes to core's."""


class Trainer(_CoreTrainer):
    """core's :class:`core.Trainer` (every flag, every entry point) with Lightning's default logger and layout.

    As Lightning's Trainer, a flag left out takes its value from a ``PL_TRAINER_<FLAG>`` environment variable when
    one is set (``PL_TRAINER_MAX_EPOCHS=1``); a flag passed in the code always wins.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(zip(inspect.signature(_CoreTrainer).parameters, args, strict=False))
        flags = {**_flags_from_environment(type(self).__name__), **kwargs}
        super().__init__(**flags)
        _announce_whole_or_all(flags)
        # Lightning resolves max_epochs=None (1000, or -1 with max_steps) when fit starts, warning then
        self._max_epochs_unresolved = flags.get("max_epochs") is None and not self.config.fast_dev_run

    # ---------------------------------------------------------------------------------------------
    # Lightning's members that core's Trainer names differently or leaves out (docs/migrating-from-lightning.md)
    # ---------------------------------------------------------------------------------------------

    @property  # type: ignore[override]
    def state(self) -> _LiveState:
        """Lightning's :class:`TrainerState`: ``status`` (running, finished, interrupted), ``fn`` and ``stage``."""
        live: _LiveState | None = self.__dict__.get("_lightning_state")
        if live is None:
            live = self.__dict__["_lightning_state"] = _LiveState()
        return live

    @state.setter
    def state(self, value: str | None) -> None:
        # core's Trainer sets its entry point's name when a run starts and None when it ends
        live = self.state
        if value is not None:
            live.status, live.fn, live.stage = TrainerStatus.RUNNING, TrainerFn(value), _STAGE_OF_FN[value]
            self.__dict__["_run_started_here"] = True  # this process runs it (and calls on_exception in it)
        elif live.status == TrainerStatus.RUNNING:
            live.status, live.stage = TrainerStatus.FINISHED, None

    @property
    def interrupted(self) -> bool:
        """Whether the latest entry point ended with an exception or Ctrl-C."""
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the latest fit/validate/test/predict loaded (``"best"``/``"last"`` resolved), or None."""
        return self.run_state.ckpt_path

    @property
    def strategy(self) -> StrategyView:
        """The run's strategy plugin, with Lightning's ``Strategy`` members (see :class:`StrategyView`)."""
        return StrategyView(self)

    @property
    def device_ids(self) -> list[int]:
        """The indices of this node's devices (``[0, 1]`` for ``devices=2``)."""
        return list(self.lite.active.config.device_ids)

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    @property
    def num_sanity_val_steps(self) -> int | float:  # type: ignore[override]
        """Lightning's value: ``float("inf")`` for ``num_sanity_val_steps=-1`` (all of the validation data)."""
        steps = self.config.num_sanity_val_steps
        return float("inf") if steps == -1 else steps

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        return [callback for callback in self.callbacks if isinstance(callback, EarlyStopping)]

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """Create the module's layers on the run's device and in its precision (``Lite.init_module``)."""
        with self.lite.init_module(empty_init=empty_init):
            yield

    @property
    def max_epochs(self) -> int | None:  # type: ignore[override]
        """Lightning's value: ``None`` when not given, until a ``fit`` resolves it (1000, or -1 with ``max_steps``)."""
        return None if self._max_epochs_unresolved else self.config.max_epochs

    def fit(self, *args: Any, **kwargs: Any) -> None:
        if self._max_epochs_unresolved:
            self._max_epochs_unresolved = False
            if self.config.max_epochs == 1000 and not any(isinstance(c, Timer) for c in self.callbacks):
                rank_zero_warn(
                    "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set "
                    "`max_epochs=-1`.", CoreWarning, stacklevel=2,
                )
        self._interruptible(super().fit, *args, **kwargs)

    # Lightning's parameter order: verbose comes before datamodule
    def validate(  # type: ignore[override]
        self, model: Any = None, dataloaders: Any = None, ckpt_path: Any = None, verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Lightning's ``validate``: without a model after ``fit``, the best checkpoint of that fit is loaded."""
        return self._evaluate_as_lightning("validate", model, dataloaders, ckpt_path, datamodule)

    def test(  # type: ignore[override]
        self, model: Any = None, dataloaders: Any = None, ckpt_path: Any = None, verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Lightning's ``test``: without a model after ``fit``, the best checkpoint of that fit is loaded."""
        return self._evaluate_as_lightning("test", model, dataloaders, ckpt_path, datamodule)

    def _evaluate_as_lightning(
        self, fn: str, model: Any, dataloaders: Any, ckpt_path: Any, datamodule: Any
    ) -> list[dict[str, float]]:
        entry_point = super().validate if fn == "validate" else super().test
        ckpt_path = self._lightning_ckpt_path(fn, model, ckpt_path)
        result: list[dict[str, float]] = self._interruptible(
            entry_point, model, dataloaders, ckpt_path=ckpt_path, datamodule=datamodule)
        return result

    def predict(self, model: Any = None, dataloaders: Any = None, datamodule: Any = None,
                return_predictions: bool | None = None, ckpt_path: Any = None) -> Any:
        """Lightning's ``predict``: predictions are returned unless ``return_predictions=False``; without a model
        after ``fit``, the best checkpoint of that fit is loaded."""
        ckpt_path = self._lightning_ckpt_path("predict", model, ckpt_path)
        return self._interruptible(super().predict, model, dataloaders, datamodule=datamodule,
                                   return_predictions=return_predictions is not False, ckpt_path=ckpt_path)

    def _lightning_ckpt_path(self, fn: str, model: Any, ckpt_path: Any) -> Any:
        """Lightning's choice of checkpoint for validate/test/predict (``_parse_ckpt_path``): with no model and no
        ``ckpt_path`` after a fit, ``"best"``, with a warning; ``"best"`` is the first ModelCheckpoint's best file."""
        if model is None and ckpt_path is None and self.module is not None:
            warnings.warn(
                f"`.{fn}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will "
                f"be used. You can pass `.{fn}(ckpt_path='best')` to use the best model or `.{fn}(ckpt_path='last')` "
                "to use the last model. If you pass a value, this warning will be silenced.",
                CoreWarning, stacklevel=3,
            )
            ckpt_path = "best"
        if ckpt_path != "best":
            return ckpt_path
        if len(self.checkpoint_callbacks) > 1:
            warnings.warn(
                f'`.{fn}(ckpt_path="best")` is called with Trainer configured with multiple `ModelCheckpoint` '
                "callbacks. It will use the best checkpoint path from first checkpoint callback.",
                CoreWarning, stacklevel=3,
            )
        callback = self.checkpoint_callback
        if callback is None:
            raise ConfigurationError(f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured.')
        if not callback.best_model_path:
            if self.fast_dev_run:
                raise ConfigurationError(
                    f'You cannot execute `.{fn}(ckpt_path="best")` with `fast_dev_run=True`. Please pass an exact '
                    f"checkpoint path to `.{fn}(ckpt_path=...)`"
                )
            raise ConfigurationError(
                f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model.'
            )
        return callback.best_model_path

    def _interruptible(self, entry_point: Any, *args: Any, **kwargs: Any) -> Any:
        """Lightning's ending of a run (``_call_and_handle_interrupt``): an exception leaves ``state.status``
        INTERRUPTED after the callbacks' ``on_exception`` (called by the run; a Module has none), then the
        DataModule's ``on_exception`` and the strategy's (``trainer.strategy.on_exception``); the run has already
        finalized the loggers as failed. Ctrl-C then ends the program with exit code 1, as in Lightning, instead of
        a traceback; any other exception is raised again.

        Where the run did not start in this process (its processes were spawned, or the arguments were refused
        before it started), the callbacks' ``on_exception`` run here, as Lightning calls them in the process that
        called the entry point; when such a run returns, ``state`` reads finished here too."""
        self.__dict__["_run_started_here"] = False
        try:
            result = entry_point(*args, **kwargs)
        except BaseException as exception:
            self.state.status = TrainerStatus.INTERRUPTED
            if isinstance(exception, KeyboardInterrupt):
                rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
            if not self.__dict__["_run_started_here"]:
                for hook in self.run_state.hooks["on_exception"]:
                    hook(self, self.module, exception)
            on_exception = getattr(self.datamodule, "on_exception", None)
            if callable(on_exception):
                on_exception(exception)
            self.strategy.on_exception(exception)
            if isinstance(exception, KeyboardInterrupt):
                sys.exit(1)
            raise
        if not self.__dict__["_run_started_here"]:  # it ran in spawned processes: finished there, as Lightning's
            live = self.state  # launcher brings the state back to the calling process
            live.status, live.fn, live.stage = TrainerStatus.FINISHED, TrainerFn(entry_point.__name__), None
        return result

    def default_loggers(self) -> list[Logger]:
        if tensorboard_available():
            return [TensorBoardLogger(save_dir=self.default_root_dir)]
        return [CSVLogger(save_dir=self.default_root_dir)]

    @property
    def default_checkpoint_dir(self) -> str:
        """``<save_dir>/<name>/<version>/checkpoints`` of the first logger (Lightning's rule), else
        ``<default_root_dir>/checkpoints``."""
        if not self.loggers:
            return os.path.join(self.default_root_dir, "checkpoints")
        return os.path.join(self.loggers[0].log_dir, "checkpoints")
