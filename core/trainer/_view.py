"""``LoopView``: the Trainer as its loops, its run set-up and its checkpointing see it.

Those modules (``_run``, ``_loops``, ``_eval``, ``_checkpoint``) are called by :class:`core.Trainer` and work on
it, so they are typed against this protocol rather than the class: the class imports them, and none of them imports
the class back, not even for annotations (``tests/test_import_cycles.py``). What a Module or callback may read is
:class:`core.module.TrainerView`; this adds what a run sets and what only the loops use. The flags are read from
``trainer.config`` (the validated :class:`~core.trainer.TrainerConfig`), so a new flag adds nothing here. mypy
checks that the Trainer satisfies it wherever the Trainer hands itself to those modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from core.module import TrainerView

if TYPE_CHECKING:
    from core.callbacks import Callback, ModelCheckpoint
    from core.module import DataModule, Module
    from core.module._optimizers import SchedulerConfig
    from core.profilers import Profiler
    from core.trainer._config import TrainerConfig
    from core.trainer._logging import MetricStore
    from core.trainer._state import RunState


class LoopView(TrainerView, Protocol):
    """What the Trainer's loops read and set on the Trainer (see the module's docstring)."""

    config: TrainerConfig
    run_state: RunState
    active_profiler: Profiler | None

    # What a run sets, and the Trainer's properties read back.
    module: Module | None
    datamodule: DataModule | None  # settable here, read-only in TrainerView
    state: str | None
    sanity_checking: bool
    callbacks: list[Callback]
    optimizers: list[Any]
    lr_scheduler_configs: list[SchedulerConfig]
    num_training_batches: float

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]: ...

    @property
    def checkpoint_callback(self) -> ModelCheckpoint | None: ...

    def attached_module(self) -> Module: ...

    def record_epoch_values(self, values: dict[str, float], store: MetricStore, log: bool) -> None: ...

