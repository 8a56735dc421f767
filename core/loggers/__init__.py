"""Loggers for :class:`core.Trainer`: ``CSVLogger`` (the default) and ``TensorBoardLogger``."""

from core.loggers._logger import Logger
from core.loggers.csv_logs import CSVLogger
from core.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
