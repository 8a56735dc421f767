"""Profilers for :class:`core.Trainer` (``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler)``).

Lightning's names and semantics: the Trainer times named *actions* of a run (``run_training_epoch``,
``run_training_batch``, ``[Strategy]ddp.training_step``, ``[Strategy]ddp.backward``,
``[LightningModule]Net.optimizer_step``, ``[_TrainingEpochLoop].train_dataloader_next``,
``[_EvaluationLoop].val_next``, ``[Callback]<state key>.<hook>``, ...) and, at the end of each entry point
(``fit``, ``validate``, ``test``, ``predict``), the profiler describes what it measured: printed by global rank 0,
or written to ``dirpath/<stage>-<filename>.txt`` (one file per rank on several processes) when ``filename`` is
given. Without a profiler nothing is wrapped: the loop pays nothing.

- :class:`SimpleProfiler`: wall time per action (mean, calls, total, share of the whole run).
- :class:`AdvancedProfiler`: ``cProfile`` per action, its functions by cumulative time.
- :class:`PyTorchProfiler`: ``torch.profiler`` over the run, each action a ``record_function`` range; the table
  of ``key_averages()`` and a Chrome trace per rank.
- :class:`PassThroughProfiler`: records nothing (what ``profiler=None`` means).
"""

from __future__ import annotations

from core.profilers._profilers import (
    AdvancedProfiler,
    PassThroughProfiler,
    Profiler,
    PyTorchProfiler,
    SimpleProfiler,
    profiler_from,
)

__all__ = [
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "profiler_from",
]
