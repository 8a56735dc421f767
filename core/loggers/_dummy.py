"""A logger that records nothing (Lightning's ``DummyLogger``): what ``fast_dev_run`` puts in place of the run's
loggers, so user code that logs (``self.logger.experiment.add_image(...)``) runs with logging off."""

from __future__ import annotations

import os
from typing import Any

from core.loggers._logger import Logger


class _DummyExperiment:
    """Answers any method call with None (``logger.experiment.add_image(...)``)."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self.nop

    def __getitem__(self, index: int) -> _DummyExperiment:
        return self


class DummyLogger(Logger):
    """A logger that records nothing: what a feature uses to run user code that logs, with logging off."""

    def __init__(self) -> None:
        super().__init__(save_dir=os.getcwd(), name="", version="")
        self._experiment = _DummyExperiment()

    @property
    def experiment(self) -> _DummyExperiment:
        return self._experiment

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        return None

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        return None

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def __getitem__(self, index: int) -> DummyLogger:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None
