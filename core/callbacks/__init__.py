"""Callbacks for :class:`core.Trainer`: checkpoints (also on exceptions), early stopping, learning-rate, device and
throughput monitoring, fine-tuning, weight averaging (SWA, EMA), model summaries and progress bars (plain, tqdm,
rich)."""

from core.callbacks._callback import Callback
from core.callbacks.checkpoint import Checkpoint
from core.callbacks.device_stats import DeviceStatsMonitor
from core.callbacks.early_stopping import EarlyStopping
from core.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from core.callbacks.gradient_accumulation import GradientAccumulationScheduler
from core.callbacks.lambda_function import LambdaCallback
from core.callbacks.lr_monitor import LearningRateMonitor
from core.callbacks.model_checkpoint import ModelCheckpoint
from core.callbacks.model_summary import ModelSummary
from core.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
from core.callbacks.prediction_writer import BasePredictionWriter
from core.callbacks.progress import ProgressBar, TQDMProgressBar
from core.callbacks.rich_model_summary import RichModelSummary
from core.callbacks.rich_progress import RichProgressBar
from core.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from core.callbacks.throughput_monitor import ThroughputMonitor
from core.callbacks.timer import Timer
from core.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "WeightAveraging",
]
