"""``TensorBoardLogger``: metrics as TensorBoard event files (needs ``pip install tensorboard``)."""

from __future__ import annotations

import importlib.util
import json
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from core._errors import ConfigurationError
from core.loggers._logger import Logger, as_mapping

__all__ = ["TensorBoardLogger"]


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardLogger(Logger):
    """Write scalars to TensorBoard event files in ``<save_dir>/<name>/version_<n>``.

    :param writer_options: Passed to ``torch.utils.tensorboard.SummaryWriter`` (``flush_secs``, ...).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "logs",
        version: int | str | None = None,
        **writer_options: Any,
    ) -> None:
        if not tensorboard_available():
            raise ConfigurationError(
                "TensorBoardLogger needs the tensorboard package, which is not installed: pip install tensorboard "
                "(or use the dependency-free core.loggers.CSVLogger)."
            )
        super().__init__(save_dir, name, version)
        self._writer_options = writer_options
        self._writer: Any = None

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter``, created on first use (on the rank that logs)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(self.log_dir, exist_ok=True)
            self._writer = SummaryWriter(log_dir=self.log_dir, **self._writer_options)
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        writer = self.experiment
        for name, value in metrics.items():
            writer.add_scalar(name, value, global_step=step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        params = as_mapping(params)
        super().log_hyperparams(params)
        self.experiment.add_text("hparams", json.dumps(params, indent=2, sort_keys=True, default=repr))

    def save(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_writer"] = None  # an open event file stays with the process that writes it
        return state
