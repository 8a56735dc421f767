"""Loggers for :class:`core.Trainer`: ``CSVLogger`` (the default), ``TensorBoardLogger``, ``MLFlowLogger`` and
``WandbLogger`` (the last two load their modules, and need mlflow / wandb, only when first used); ``DummyLogger``
records nothing (``fast_dev_run``'s stand-in), its ``DummyExperiment`` answers every call."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from core.loggers._dummy import DummyExperiment, DummyLogger
from core.loggers._logger import Logger
from core.loggers.csv_logs import CSVLogger
from core.loggers.tensorboard import TensorBoardLogger

if TYPE_CHECKING:
    from core.loggers.mlflow import MLFlowLogger
    from core.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "DummyExperiment", "DummyLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]

_LAZY = {"MLFlowLogger": "core.loggers.mlflow", "WandbLogger": "core.loggers.wandb"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'core.loggers' has no attribute {name!r}")
