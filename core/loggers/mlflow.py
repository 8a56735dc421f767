"""``MLFlowLogger``: Lightning 2.6's MLflow logger (needs ``pip install mlflow``).

Same constructor, defaults and behaviour as ``lightning.pytorch.loggers.MLFlowLogger``: a run is created in the
experiment ``experiment_name`` on first use; hyperparameters become params (flattened with ``/``, values cut to
250 characters, sent 100 at a time), metrics are logged with their step, ``finalize`` marks the run ``FINISHED``
(or ``FAILED``), and with ``log_model`` the checkpoints a ``ModelCheckpoint`` kept are logged as artifacts (``True``:
at the end; ``"all"``: after every save). ``name`` is the experiment id and ``version`` the run id. Only global
rank 0 writes; mlflow is imported when the logger is constructed, never by ``import core``.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from core._errors import ConfigurationError
from core.loggers._logger import Logger, as_mapping
from core.loggers._remote import checkpoint_metadata, flatten, new_checkpoints, prefixed, rank_zero_only, require

__all__ = ["MLFlowLogger"]

LOCAL_FILE_URI_PREFIX = "file:"
log = logging.getLogger(__name__)


class MLFlowLogger(Logger):
    """Log to MLflow, to a tracking server (``tracking_uri="http://..."``) or to files (``file:<save_dir>``).

    :param experiment_name: The experiment's name; created when missing.
    :param run_name: The new run's name (the ``mlflow.runName`` tag).
    :param tracking_uri: Where to log; ``$MLFLOW_TRACKING_URI`` when set, else ``file:<save_dir>``.
    :param tags: Tags of the new run.
    :param save_dir: The local directory used when no ``tracking_uri`` is given.
    :param log_model: ``True``: log the checkpoints kept by ``ModelCheckpoint`` at the end (after every save if
        ``save_top_k=-1``); ``"all"``: after every save; ``False``: never.
    :param prefix: Put before every metric name, joined with ``-``.
    :param artifact_location: The artifact location of a newly created experiment.
    :param run_id: Resume this run instead of creating one.
    :param synchronous: Passed to ``log_batch`` (mlflow>=2.8); ``None`` keeps mlflow's default.
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = os.getenv("MLFLOW_TRACKING_URI"),
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        require("MLFlowLogger", "mlflow", "mlflow")
        super().__init__(save_dir or "./mlruns", experiment_name, run_id)
        if not tracking_uri:
            tracking_uri = f"{LOCAL_FILE_URI_PREFIX}{save_dir}"
        self._experiment_name = experiment_name
        self._experiment_id: str | None = None
        self._tracking_uri = tracking_uri
        self._run_name = run_name
        self._run_id = run_id
        self.tags = tags
        self._log_model = log_model
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callback: Any = None
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._log_batch_kwargs = {} if synchronous is None else {"synchronous": synchronous}
        self._initialized = False
        self._mlflow_client: Any = None

    @property
    @rank_zero_only
    def experiment(self) -> Any:
        """The ``mlflow.tracking.MlflowClient``; creates the experiment and the run on first use (rank 0 only)."""
        if self._initialized:
            return self._mlflow_client
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(self._tracking_uri)
        try:
            client = self._mlflow_client = MlflowClient(self._tracking_uri)
            return self._start(client)
        except mlflow.exceptions.MlflowException as error:
            if "MLFLOW_ALLOW_FILE_STORE" not in str(error):
                raise
            raise ConfigurationError(
                f"MLFlowLogger(tracking_uri={self._tracking_uri!r}): the installed mlflow {mlflow.__version__} "
                "refuses its file backend unless MLFLOW_ALLOW_FILE_STORE=true is set. Set that variable, or pass "
                "tracking_uri='sqlite:///<dir>/mlflow.db' or a server's http:// URI."
            ) from error

    def _start(self, client: Any) -> Any:
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
            self._initialized = True
            return client
        if self._experiment_id is None:
            found = client.get_experiment_by_name(self._experiment_name)
            if found is not None and found.lifecycle_stage != "deleted":
                self._experiment_id = found.experiment_id
            else:
                log.warning("Experiment with name %s not found. Creating it.", self._experiment_name)
                self._experiment_id = client.create_experiment(
                    name=self._experiment_name, artifact_location=self._artifact_location
                )
        tags = dict(self.tags or {})
        if self._run_name is not None:
            from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

            tags[MLFLOW_RUN_NAME] = self._run_name
            self.tags = tags
        from mlflow.tracking.context.registry import resolve_tags

        self._run_id = client.create_run(experiment_id=self._experiment_id, tags=resolve_tags(tags)).info.run_id
        self._initialized = True
        return client

    @property
    def run_id(self) -> str | None:
        """The run's id (creates the experiment and run on first use)."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The experiment's id (creates the experiment on first use)."""
        _ = self.experiment
        return self._experiment_id

    @property
    def save_dir(self) -> str | None:
        """The local root directory of the experiments if the tracking URI is ``file:``, else ``None``."""
        if self._tracking_uri.startswith(LOCAL_FILE_URI_PREFIX):
            return self._tracking_uri[len(LOCAL_FILE_URI_PREFIX):]
        return None

    @property
    def name(self) -> str | None:  # type: ignore[override]
        """The experiment id."""
        return self.experiment_id

    @property
    def version(self) -> str | None:  # type: ignore[override]
        """The run id."""
        return self.run_id

    @property
    def version_if_chosen(self) -> str | None:
        return self._run_id

    def use_version(self, version: int | str | None) -> None:
        """Log into run ``version`` (a run id) from now on; ``ddp_spawn`` hands back rank 0's run this way."""
        if version is not None and str(version) != self._run_id:
            self._run_id = str(version)
            self._initialized = False

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<experiment id>/<run id>`` (the run's directory when tracking to ``file:``)."""
        return os.path.join(self.save_dir or self._save_dir or os.getcwd(), str(self.experiment_id), str(self.run_id))

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        params = as_mapping(params)
        from mlflow.entities import Param

        params_list = [Param(key=key, value=str(value)[:250]) for key, value in flatten(params).items()]
        for start in range(0, len(params_list), 100):  # at most 100 params per request
            self.experiment.log_batch(run_id=self.run_id, params=params_list[start:start + 100],
                                      **self._log_batch_kwargs)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        timestamp_ms = int(time.time() * 1000)
        metrics_list = []
        for key, value in prefixed(self._prefix, metrics, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                log.warning("Discarding metric with string value %s=%s.", key, value)
                continue
            clean = re.sub("[^a-zA-Z0-9_/. -]+", "", key)
            if clean != key:
                log.warning("MLflow only allows '_', '/', '.' and ' ' special characters in metric names: "
                            "logging %r as %r.", key, clean)
            metrics_list.append(Metric(key=clean, value=float(value), timestamp=timestamp_ms, step=step or 0))
        self.experiment.log_batch(run_id=self.run_id, metrics=metrics_list, **self._log_batch_kwargs)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if not self._initialized:
            return
        mlflow_status = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}.get(status, status)
        if self._checkpoint_callback is not None:
            self._scan_and_log_checkpoints(self._checkpoint_callback)
        if self.experiment.get_run(self.run_id):
            self.experiment.set_terminated(self.run_id, mlflow_status)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after ``checkpoint_callback`` (a ``ModelCheckpoint``) saved: log it now or remember it."""
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._scan_and_log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback

    @rank_zero_only
    def _scan_and_log_checkpoints(self, checkpoint_callback: Any) -> None:
        import yaml

        for mtime, path in new_checkpoints(checkpoint_callback, self._logged_model_time):
            metadata = checkpoint_metadata(checkpoint_callback, path, "Checkpoint", (
                "monitor", "mode", "save_last", "save_top_k", "save_weights_only", "every_n_train_steps",
                "every_n_epochs"))
            aliases = ["latest", "best"] if path == checkpoint_callback.best_model_path else ["latest"]
            artifact_path = Path(path).stem
            self.experiment.log_artifact(self._run_id, path, artifact_path)
            with tempfile.TemporaryDirectory() as tmp_dir:
                with open(os.path.join(tmp_dir, "metadata.yaml"), "w") as file:
                    yaml.dump(metadata, file, default_flow_style=False)
                with open(os.path.join(tmp_dir, "aliases.txt"), "w") as file:
                    file.write(str(aliases))
                self.experiment.log_artifacts(self._run_id, tmp_dir, artifact_path)
            self._logged_model_time[path] = mtime

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_mlflow_client"] = None  # a client (and its HTTP session) stays with the process that made it
        state["_initialized"] = False
        return state

    def __repr__(self) -> str:
        return (f"MLFlowLogger(experiment_name={self._experiment_name!r}, tracking_uri={self._tracking_uri!r}, "
                f"run_id={self._run_id!r})")
