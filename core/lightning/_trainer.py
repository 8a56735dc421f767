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
from typing import Any

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


class Trainer(_CoreTrainer):
    """core's :class:`core.Trainer` (every flag, every entry point) with Lightning's default logger and layout.

    As Lightning's Trainer, a flag left out takes its value from a ``PL_TRAINER_<FLAG>`` environment variable when
    one is set (``PL_TRAINER_MAX_EPOCHS=1``); a flag passed in the code always wins.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(zip(inspect.signature(_CoreTrainer).parameters, args, strict=False))
        super().__init__(**{**_flags_from_environment(type(self).__name__), **kwargs})

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
