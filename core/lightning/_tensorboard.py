"""``hp_metric`` for Lightning's TensorBoard loggers (core/lightning/_loggers.py): hyperparameters in the HPARAMS tab.

Lightning's ``TensorBoardLogger.log_hyperparams(params, metrics=None, step=None)`` writes ``hparams.yaml`` and an
hparams summary: the params flattened (``{"a": {"b": 1}}`` -> ``a/b``), values TensorBoard cannot show turned into
strings, and the metrics, by default the placeholder ``{"hp_metric": -1}`` (``default_hp_metric=False`` turns it off;
a number for ``metrics`` means ``{"hp_metric": number}``). The metrics are logged as scalars too.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from core.loggers import Logger

_SHOWN = (bool, int, float, str)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings joined with ``/``, as Lightning's ``_flatten_dict``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def _sanitized(params: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    return {name: value if isinstance(value, (*_SHOWN, torch.Tensor)) else str(value)
            for name, value in params.items()}


class HpMetric:
    """Adds Lightning's ``default_hp_metric`` and ``log_hyperparams(params, metrics, step)`` to a TensorBoard logger."""

    experiment: Any

    def __init__(self, *args: Any, default_hp_metric: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.default_hp_metric = default_hp_metric

    def save(self) -> None:
        super().save()  # type: ignore[misc]
        self._write_missing_hparams_file()

    def finalize(self, status: str) -> None:
        super().finalize(status)  # type: ignore[misc]
        if status == "success":  # Lightning saves once more after a successful run
            self._write_missing_hparams_file()

    def _write_missing_hparams_file(self) -> None:
        # Lightning's TensorBoardLogger.save(): hparams.yaml once the run's directory exists, so a run that logged no
        # hyperparameters leaves '{}' (what it logged is already in the file).
        log_dir: str = self.log_dir  # type: ignore[attr-defined]
        if os.path.isdir(log_dir) and not os.path.isfile(os.path.join(log_dir, self.hparams_file)):  # type: ignore[attr-defined]
            Logger.log_hyperparams(self, {})  # type: ignore[arg-type]  # the file only, not the text summary

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None, metrics: Any = None,
                        step: int | None = None) -> None:
        params = vars(params) if isinstance(params, Namespace) else dict(params or {})
        super().log_hyperparams(params)  # type: ignore[misc]  # hparams.yaml and the text summary
        if metrics is None:
            metrics = {"hp_metric": -1} if self.default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:
            return
        self.log_metrics(metrics, step)  # type: ignore[attr-defined]
        from torch.utils.tensorboard.summary import hparams

        writer = self.experiment._get_file_writer()
        for summary in hparams(_sanitized(flatten(params)), dict(metrics)):
            writer.add_summary(summary, step)
