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

import torch

from core._errors import ConfigurationError, CoreWarning
from core.callbacks import EarlyStopping
from core.lightning._compat import RunningStage, TrainerFn, TrainerState, TrainerStatus
from core.lightning._loggers import CSVLogger, TensorBoardLogger
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


_STAGE_OF_FN = {"fit": RunningStage.TRAINING, "validate": RunningStage.VALIDATING, "test": RunningStage.TESTING,
                 "predict": RunningStage.PREDICTING}


class _LiveState(TrainerState):
    """Lightning's ``TrainerState``, also read by core's Trainer, which keeps its run's name in ``state``: it equals
    the running entry point's name (``state == "fit"``) and is false when no entry point runs."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.status == TrainerStatus.RUNNING and self.fn == other
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return self.status == TrainerStatus.RUNNING


LIGHTNING_READS: Final = frozenset({"strategy", "num_sanity_val_steps"})
"""Flags whose value the Lightning Trainer reads back as Lightning does: ``trainer.strategy`` is the strategy (not the
flag's alias) and ``num_sanity_val_steps=-1`` reads as ``inf``. It declares no flag: each still goes to core's."""


class _StrategyView:
    """``trainer.strategy`` of a Lightning Trainer: the run's strategy plugin, with the members of Lightning's
    ``Strategy`` that programs read (``root_device``, ``model``, ``broadcast``, ``barrier``, ...).

    ``isinstance(trainer.strategy, DDPStrategy)`` checks the plugin's class; any other attribute is the plugin's.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    @property
    def plugin(self) -> object:
        return self._trainer.lite.strategy

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() reads it: the view passes for the plugin's class
        return type(self.plugin)

    @property
    def root_device(self) -> torch.device:
        """The device of this process's run (the resolved one, also outside a run)."""
        active = self._trainer.lite.active
        if active.device is not None:
            return active.device
        accelerator, ids = active.config.accelerator, active.config.device_ids  # before the first run
        return torch.device("cpu") if accelerator == "cpu" or not ids else torch.device(accelerator, ids[0])

    @property
    def model(self) -> torch.nn.Module | None:
        """The module as the strategy wrapped it during a run (``DistributedDataParallel``), else the Module."""
        step_module = self._trainer.run_state.step_module
        if step_module is not None:
            wrapped = getattr(step_module, "_forward_module", None)
            return wrapped if wrapped is not None else step_module
        return self._trainer.module

    @property
    def launcher(self) -> None:
        return None  # core's strategies launch their own processes

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self._trainer.lite.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        self._trainer.lite.barrier(name)

    def all_gather(self, tensor: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        return self._trainer.lite.all_gather(tensor, group=group, sync_grads=sync_grads)

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str = "mean") -> Any:
        return self._trainer.lite.all_reduce(tensor, group=group, reduce_op=reduce_op)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plugin, name)

    def __repr__(self) -> str:
        return f"<trainer.strategy: {self.plugin!r}>"


class Trainer(_CoreTrainer):
    """core's :class:`core.Trainer` (every flag, every entry point) with Lightning's default logger and layout.

    As Lightning's Trainer, a flag left out takes its value from a ``PL_TRAINER_<FLAG>`` environment variable when
    one is set (``PL_TRAINER_MAX_EPOCHS=1``); a flag passed in the code always wins.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(zip(inspect.signature(_CoreTrainer).parameters, args, strict=False))
        super().__init__(**{**_flags_from_environment(type(self).__name__), **kwargs})

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
    def strategy(self) -> _StrategyView:
        """The run's strategy plugin, with Lightning's ``Strategy`` members (see :class:`_StrategyView`)."""
        return _StrategyView(self)

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

    def fit(self, *args: Any, **kwargs: Any) -> None:
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
        """Lightning's ending of a run: an exception leaves ``state.status`` INTERRUPTED (the callbacks' and the
        Module's ``on_exception`` ran, loggers finalized as failed); Ctrl-C ends the program with exit code 1 after
        that shutdown, as Lightning's ``_call_and_handle_interrupt`` does, instead of a traceback."""
        try:
            return entry_point(*args, **kwargs)
        except KeyboardInterrupt:
            self.state.status = TrainerStatus.INTERRUPTED
            print("\nDetected KeyboardInterrupt, attempting graceful shutdown ...", file=sys.stderr)
            sys.exit(1)
        except BaseException:
            self.state.status = TrainerStatus.INTERRUPTED
            raise

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
