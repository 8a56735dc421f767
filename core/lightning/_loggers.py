"""Lightning's logger signatures over core's loggers, where they differ.

Lightning's ``pytorch.loggers.CSVLogger`` and ``TensorBoardLogger`` take ``save_dir`` (as core's do) and name
their runs ``lightning_logs`` by default; Fabric's take ``root_dir`` instead. These subclasses accept Lightning's
arguments, defaults and ``prefix`` (added before every metric name, joined with ``-``), so a script keeps its
logger lines unchanged. core's own classes keep ``logs`` as the default name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from core.lightning._tensorboard import HpMetric
from core.loggers import CSVLogger as _CoreCSVLogger
from core.loggers import TensorBoardLogger as _CoreTensorBoardLogger

DEFAULT_NAME = "lightning_logs"


def _prefixed(prefix: str, metrics: Mapping[str, float]) -> dict[str, float]:
    return {f"{prefix}-{name}" if prefix else name: value for name, value in metrics.items()}


class CSVLogger(_CoreCSVLogger):
    """``lightning.pytorch.loggers.CSVLogger(save_dir, name="lightning_logs", version=None, prefix="", ...)``."""

    hparams_file = "hparams.yaml"  # Lightning's file name and format

    def __init__(self, save_dir: str | os.PathLike[str], name: str | None = DEFAULT_NAME,
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir, name, version, flush_logs_every_n_steps)
        self.prefix = prefix

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(_prefixed(self.prefix, metrics), step)


class FabricCSVLogger(CSVLogger):
    """``lightning.fabric.loggers.CSVLogger(root_dir, name="lightning_logs", version=None, prefix="", ...)``."""

    def __init__(self, root_dir: str | os.PathLike[str], name: str | None = DEFAULT_NAME,
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(root_dir, name, version, prefix, flush_logs_every_n_steps)

    @property
    def root_dir(self) -> str:
        return self._root()


class TensorBoardLogger(HpMetric, _CoreTensorBoardLogger):
    """``lightning.pytorch.loggers.TensorBoardLogger(save_dir, name="lightning_logs", version=None, ...)``, with
    Lightning's ``default_hp_metric`` (core/lightning/_tensorboard.py)."""

    hparams_file = "hparams.yaml"  # Lightning's file name and format
    NAME_HPARAMS_FILE = hparams_file  # Lightning's class constant for it

    def __init__(self, save_dir: str | os.PathLike[str], name: str | None = DEFAULT_NAME,
                 version: int | str | None = None, prefix: str = "", **writer_options: Any) -> None:
        super().__init__(save_dir, name, version, **writer_options)
        self.prefix = prefix

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(_prefixed(self.prefix, metrics), step)


class FabricTensorBoardLogger(TensorBoardLogger):
    """``lightning.fabric.loggers.TensorBoardLogger(root_dir, name="lightning_logs", version=None, ...)``."""

    def __init__(self, root_dir: str | os.PathLike[str], name: str | None = DEFAULT_NAME,
                 version: int | str | None = None, prefix: str = "", **writer_options: Any) -> None:
        super().__init__(root_dir, name, version, prefix, **writer_options)

    @property
    def root_dir(self) -> str:
        return self._root()
