"""Callbacks for :class:`core.Trainer`: checkpoints, early stopping, learning-rate and device monitoring, model
summaries and progress bars (plain, tqdm, rich)."""

from core.callbacks._callback import Callback
from core.callbacks.checkpoint import Checkpoint
from core.callbacks.device_stats import DeviceStatsMonitor
from core.callbacks.early_stopping import EarlyStopping
from core.callbacks.gradient_accumulation import GradientAccumulationScheduler
from core.callbacks.lambda_function import LambdaCallback
from core.callbacks.lr_monitor import LearningRateMonitor
from core.callbacks.model_checkpoint import ModelCheckpoint
from core.callbacks.model_summary import ModelSummary
from core.callbacks.prediction_writer import BasePredictionWriter
from core.callbacks.progress import ProgressBar, TQDMProgressBar
from core.callbacks.rich_model_summary import RichModelSummary
from core.callbacks.rich_progress import RichProgressBar
from core.callbacks.timer import Timer

__all__ = [
    "BasePredictionWriter",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "TQDMProgressBar",
    "Timer",
]
