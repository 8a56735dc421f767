"""Callbacks for :class:`core.Trainer`: checkpoints, early stopping, learning-rate logging, progress bars."""

from core.callbacks._callback import Callback
from core.callbacks.early_stopping import EarlyStopping
from core.callbacks.lr_monitor import LearningRateMonitor
from core.callbacks.model_checkpoint import ModelCheckpoint
from core.callbacks.progress import ProgressBar, TQDMProgressBar

__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ProgressBar",
    "TQDMProgressBar",
]
