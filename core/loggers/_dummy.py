"""A logger that records nothing (Lightning's ``DummyLogger``): what ``fast_dev_run`` puts in place of the run's
loggers, so user code that logs (``self.logger.experiment.add_image(...)``) runs with logging off."""

from __future__ import annotations

import os
from typing import Any

from core.loggers._logger import Logger


class DummyExperiment:
    """Answers any method call with None (``logger.experiment.add_image(...)``) and ignores item assignment
    (``logger.experiment["key"] = value``): Lightning's ``DummyExperiment``."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self.nop

    def __getitem__(self, index: Any) -> DummyExperiment:
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        return None


class DummyLogger(Logger):
    """A logger that records nothing: what a feature uses to run user code that logs, with logging off."""

    def __init__(self) -> None:
        super().__init__(save_dir=os.getcwd(), name="", version="")
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
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
