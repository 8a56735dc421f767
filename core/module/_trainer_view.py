"""``TrainerView``: what a Module, a DataModule and a callback may read from the Trainer running them.

The Trainer sits above ``core.module``, ``core.callbacks`` and ``core.loggers`` in the layers, so those packages
never name its class, not even in annotations (``tests/test_trainer_view.py`` checks, type-only imports
included): they are typed against this protocol, which :class:`core.Trainer` satisfies structurally (mypy checks
it where the Trainer attaches itself to a Module). What is not here (the loops' run state, the Trainer's private
attributes) is the Trainer's own business.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from core.lite import Lite
    from core.loggers import Logger
    from core.module import DataModule, Module
    from core.module._optimizers import SchedulerConfig


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
    def logged_metrics(self) -> dict[str, float]: ...

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
