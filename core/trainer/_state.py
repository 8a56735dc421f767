"""The state of one Trainer run, shared explicitly by the Trainer, its loops, the Module and callbacks.

The Trainer is the user's object; its loops (fit, evaluation, prediction), checkpointing and the Module's
``self.log`` work on this record instead of on the Trainer's private attributes, so what a loop may read
and write is written down here once. Callbacks read it through the Trainer's public properties
(``global_step``, ``callback_metrics``, ``batches_done``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import torch

from core.callbacks._callback import CallbackHooks
from core.trainer._logging import MetricStore
from core.trainer._samples import EpochSamples, SamplePosition

if TYPE_CHECKING:
    from core.lite import Lite


@attrs.define
class FitProgress:
    """Where the fit loop is. A checkpoint saved at any of the loop's save points restores it exactly.

    :param epoch: The epoch being run (0-based).
    :param global_step: Optimizer steps taken since the start of training.
    :param batches_done: Training batches finished in this epoch.
    :param total_batches: Training batches finished since the start of training.
    :param validated: Whether the validation due after ``batches_done`` batches has run.
    :param epoch_finished: Whether the end of ``epoch`` (its hooks, metrics and schedulers) is done.
    """

    epoch: int = 0
    global_step: int = 0
    batches_done: int = 0
    total_batches: int = 0
    validated: bool = True
    epoch_finished: bool = False

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> FitProgress:
        names = {field.name for field in attrs.fields(cls)}
        return cls(**{name: value for name, value in saved.items() if name in names})


def _cpu_store() -> MetricStore:
    return MetricStore(None, True, torch.device("cpu"))


@attrs.define(eq=False)
class RunState:
    """What a run holds while its loops run (and keeps after it, for the Trainer's properties).

    :param lite: The ``Lite`` the run trains on (a fresh one per run).
    :param hooks: The callbacks' hooks, bound once per run.
    :param progress: Where the fit loop is (epoch, steps, batches); restored from checkpoints.
    :param train_metrics: What ``self.log`` recorded during training.
    :param metrics: The store ``self.log`` writes to now (the training one, or an evaluation loop's).
    :param callback_metrics: Epoch values and the latest step values, for callbacks (monitor keys).
    :param logged_metrics: What was last sent to the loggers.
    :param prog_bar_names: Names logged with ``prog_bar=True``.
    :param epoch_start_rng: The random generators as they were when this epoch's data was drawn.
    :param resume_rng: The generators a resumed fit restores (at the save, at its epoch's start).
    :param epoch_samples: What the running epoch's training iteration reads, to save the position in samples
        (``None``: a loader whose order no other world size can draw).
    :param resume_samples: A resumed fit's saved position in samples (``None`` in an older checkpoint) and the
        world size that saved it, used once by the epoch it resumes.
    :param stopped_at: Where a fit that stopped in the middle of an epoch (``max_steps``, ``max_time``, a callback's
        ``should_stop``) stopped: its progress then and its position in samples (plain values, or ``None``). A
        checkpoint saved after the stop records it, so the epoch resumes there (docs/trainer-checkpoints.md).
    :param step_module: The set-up module whose forward runs the step methods (``None`` outside a run).
    :param predictions: The predict loop's outputs so far, per loader.
    :param predict_batch_indices: The dataset indices of the batch being predicted (``None``: unknown).
    :param predict_epoch_batch_indices: Per predict loader, the dataset indices of each batch predicted so far.
    :param predict_recorders: The predict loop's index-recording batch samplers (internal to the loop).
    :param accumulate_grad_batches: Set during a run (``GradientAccumulationScheduler``) to change the flag's
        value from the next epoch on; ``None``: the flag.
    :param finished_fit: Where the latest entry point, if it was a ``fit`` that finished, ran: ``"here"`` (this
        process holds its optimizers: ``save_checkpoint`` can save the final state), ``"elsewhere"`` (processes
        of ``ddp_spawn``, which are gone); ``None`` otherwise.
    :param fit_precision_state: The precision plugin's state at the end of that ``fit`` (a loss scaler's scale),
        which ``save_checkpoint`` after it writes: its short run's precision plugin is a fresh one.
    :param configured_optimizers: The optimizers ``configure_optimizers`` returned in the latest run, as the Module
        made them (not as a strategy set them up): ``save_checkpoint`` after ``fit`` sets one up again where the
        strategy replaced it by an engine's own that is no ``torch.optim.Optimizer`` (DeepSpeed's ZeRO optimizer),
        and that strategy recognises it.
    :param ckpt_path: The checkpoint the latest entry point loaded (resolved: ``"best"`` and ``"last"`` become
        the file), or ``None``.
    :param dataloaders: The loaders each loop set up in the latest run that used it, by data key (``"train"``,
        ``"val"``, ``"test"``, ``"predict"``), as the loop reads them (with the strategy's sampler).
    :param eval_logged_batches: Per evaluation loader, its batches done so far in this entry point (the sanity
        check aside): the loggers' step for the evaluation step values, as Lightning counts it.
    :param eval_step_bar: The latest evaluation step values logged with ``prog_bar=True`` in this entry point.
    :param batch_logger_step: The loggers' step of the latest training batch of this fit (``None`` before its first):
        the batches that stepped the optimizers before it (every batch under manual optimization), as Lightning
        counts. The batch's values, its validation and the end of its epoch go under it.
    """

    lite: Lite
    hooks: CallbackHooks
    progress: FitProgress = attrs.field(factory=FitProgress)
    train_metrics: MetricStore = attrs.field(factory=_cpu_store)
    metrics: MetricStore = attrs.field(default=attrs.Factory(lambda self: self.train_metrics, takes_self=True))
    callback_metrics: dict[str, torch.Tensor] = attrs.field(factory=dict)
    logged_metrics: dict[str, float] = attrs.field(factory=dict)
    prog_bar_names: set[str] = attrs.field(factory=set)
    epoch_start_rng: dict[str, Any] | None = None
    resume_rng: tuple[Any, Any] | None = None
    epoch_samples: EpochSamples | None = None
    resume_samples: tuple[SamplePosition | None, int] | None = None
    stopped_at: tuple[FitProgress, dict[str, Any] | None] | None = None
    step_module: Any = None
    accumulate_grad_batches: int | None = None
    predictions: list[list[Any]] = attrs.field(factory=list)
    predict_batch_indices: list[int] | None = None
    predict_epoch_batch_indices: list[list[list[int]]] = attrs.field(factory=list)
    predict_recorders: list[Any] = attrs.field(factory=list)
    finished_fit: str | None = None
    fit_precision_state: dict[str, Any] | None = None
    configured_optimizers: list[Any] = attrs.field(factory=list)
    ckpt_path: str | None = None
    dataloaders: dict[str, list[Any]] = attrs.field(factory=dict)
    eval_logged_batches: dict[int, int] = attrs.field(factory=dict)
    eval_step_bar: dict[str, float] = attrs.field(factory=dict)
    batch_logger_step: int | None = None
