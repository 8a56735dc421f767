"""``CSVLogger``: metrics in ``metrics.csv``, one row per logged step; no dependency."""

from __future__ import annotations

import csv
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from core._errors import CoreWarning
from core.loggers._logger import Logger, is_url, list_dir, make_dirs, open_text

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Write metrics to ``<save_dir>/<name>/version_<n>/metrics.csv``.

    Values logged at the same step share one row (the step's training values, the validation values of
    that step, the learning rate); a column appears the first time a name is logged and earlier rows leave
    it empty.

    :param flush_logs_every_n_steps: Write to disk after this many :meth:`log_metrics` calls (and at the end of
        the run).
    """

    METRICS_FILE = "metrics.csv"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "logs",
        version: int | str | None = None,
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version)
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []
        self._row_of_step: dict[int, int] = {}  # step -> index in _rows
        self._columns: list[str] = ["step"]
        self._written_rows = 0  # rows on disk, unchanged since written
        self._written_columns = 0
        self._dirty = False  # a row already on disk got a new value
        self._unsaved_calls = 0  # log_metrics calls since the last save: what flush_logs_every_n_steps counts
        self._dir_checked = False

    @property
    def metrics_file(self) -> str:
        return os.path.join(self.log_dir, self.METRICS_FILE)

    @property
    def metrics_file_path(self) -> str:
        """:attr:`metrics_file` under the name of Lightning's experiment writer."""
        return self.metrics_file

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows not written to :attr:`metrics_file` yet (empty after :meth:`save`)."""
        return self._rows[self._written_rows :]

    @property
    def experiment(self) -> CSVLogger:
        """The object that writes the file: this logger (``logger.experiment.log_metrics(...)`` as in Lightning)."""
        self._check_log_dir()
        return self

    def _check_log_dir(self) -> None:
        """Once, before this run writes: a run directory that already holds files belongs to an earlier run with
        the same version. Warn, and remove its metrics file, which this run replaces (Lightning does the same)."""
        if self._dir_checked:
            return
        self._dir_checked = True
        # This run's own checkpoints may be there first (ModelCheckpoint writes into log_dir/checkpoints).
        if set(list_dir(self.log_dir)) - {"checkpoints"}:
            warnings.warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty. Previous log files in this "
                f"directory will be deleted when the new ones are saved! Give the logger another version (or none, "
                f"to take the next free one) to keep them.",
                CoreWarning, stacklevel=3,
            )
            if self.METRICS_FILE in list_dir(self.log_dir):
                if is_url(self.metrics_file):
                    from core.toolkit import remove_path

                    remove_path(self.metrics_file)
                else:
                    os.remove(self.metrics_file)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Add ``metrics`` to the row of ``step`` (``None``: a new row, numbered by the rows so far)."""
        self._check_log_dir()
        if step is None:
            step = len(self._rows)
        index = self._row_of_step.get(step)
        if index is None:
            self._row_of_step[step] = len(self._rows)
            row: dict[str, Any] = {"step": step}
            self._rows.append(row)
        else:
            row = self._rows[index]
            self._dirty = self._dirty or index < self._written_rows
        for name, value in metrics.items():
            if name not in row and name not in self._columns:
                self._columns.append(name)
            row[name] = value
        self._unsaved_calls += 1  # a value merged into a written row counts too: it must reach the disk as well
        if self._unsaved_calls >= self.flush_logs_every_n_steps:
            self.save()

    def save(self) -> None:
        if not self._rows or (len(self._rows) == self._written_rows and not self._dirty):
            return
        self._check_log_dir()
        make_dirs(self.log_dir)
        rewrite = (self._dirty or self._written_rows == 0 or len(self._columns) != self._written_columns
                   or is_url(self.metrics_file))  # object stores append nothing: the whole file each time
        rows = self._rows if rewrite else self._rows[self._written_rows :]
        with open_text(self.metrics_file, "w" if rewrite else "a") as file:
            writer = csv.DictWriter(file, fieldnames=self._columns, restval="")
            if rewrite:
                writer.writeheader()
            writer.writerows(rows)
        self._written_rows = len(self._rows)
        self._written_columns = len(self._columns)
        self._dirty = False
        self._unsaved_calls = 0

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Write the hyperparameters (see :meth:`Logger.log_hyperparams`), after the check of the run directory."""
        self._check_log_dir()  # before this run's hparams file makes the directory non-empty
        super().log_hyperparams(params)
