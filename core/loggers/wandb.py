"""``WandbLogger``: Lightning 2.6's Weights & Biases logger (needs ``pip install wandb``).

Same constructor, defaults and behaviour as ``lightning.pytorch.loggers.WandbLogger``: ``wandb.init`` runs on first
use (``project`` defaults to ``$WANDB_PROJECT`` or ``lightning_logs``, ``resume="allow"``, extra keyword arguments go
to ``wandb.init``); hyperparameters update the run's config; metrics are logged with ``trainer/global_step`` as
their x-axis; with ``log_model`` the checkpoints a ``ModelCheckpoint`` kept are logged as ``model`` artifacts.
As in Lightning, ``finalize`` does not end the wandb run: call ``wandb.finish()`` (or
``logger.experiment.finish()``) when done. ``offline=True`` (or ``WANDB_MODE=offline``) writes the run under
``<save_dir>/wandb`` for ``wandb sync``. Only global rank 0 writes; wandb is imported when the logger is
constructed, never by ``import core``.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any, Literal

from core._errors import ConfigurationError
from core.loggers._logger import Logger, as_mapping
from core.loggers._remote import checkpoint_metadata, new_checkpoints, prefixed, rank_zero_only, require

__all__ = ["WandbLogger"]


def _plain(value: Any) -> Any:
    """Callables by their name, anything else JSON cannot hold by its ``repr`` (as Lightning sanitises)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(value):
        return getattr(value, "__name__", repr(value))
    return repr(value)


class WandbLogger(Logger):
    """Log to Weights & Biases.

    :param name: The run's display name.
    :param save_dir: Where wandb writes its files (``<save_dir>/wandb``).
    :param version: The run id, to resume a run (same as ``id``).
    :param offline: Log offline (to be uploaded later with ``wandb sync``).
    :param dir: Same as ``save_dir`` (used when ``save_dir`` is ``None``).
    :param id: Same as ``version``.
    :param anonymous: Allow anonymous logging.
    :param project: The project; ``$WANDB_PROJECT`` or ``lightning_logs`` by default.
    :param log_model: ``True``: log the checkpoints kept by ``ModelCheckpoint`` at the end (after every save if
        ``save_top_k=-1``); ``"all"``: after every save; ``False``: never. Not possible offline.
    :param experiment: An existing wandb run to log into.
    :param prefix: Put before every metric name, joined with ``-``.
    :param checkpoint_name: The checkpoint artifacts' name (``model-<run id>`` by default).
    :param add_file_policy: ``"mutable"`` or ``"immutable"``, for ``Artifact.add_file``.
    :param kwargs: More arguments of ``wandb.init`` (``entity``, ``group``, ``tags``, ``config``, ...).
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        require("WandbLogger", "wandb", "wandb")
        if offline and log_model:
            raise ConfigurationError(
                f"WandbLogger(log_model={log_model!r}, offline={offline}) cannot work: model checkpoints cannot be "
                "uploaded in offline mode. Set offline=False to log the model, or log_model=False."
            )
        directory = os.fspath(save_dir) if save_dir is not None else (os.fspath(dir) if dir is not None else None)
        project = project or os.environ.get("WANDB_PROJECT", "lightning_logs")
        self._wandb_init: dict[str, Any] = {
            "name": name,
            "project": project,
            "dir": directory,
            "id": version or id,
            "resume": "allow",
        }
        if anonymous is not None:  # wandb warns about the setting even when it is None
            self._wandb_init["anonymous"] = "allow" if anonymous else None
        self._wandb_init.update(**kwargs)
        super().__init__(self._wandb_init.get("dir") or ".", project, self._wandb_init.get("id"))
        self._offline = offline
        self._log_model = log_model
        self._prefix = prefix
        self._experiment = experiment
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callbacks: dict[int, Any] = {}
        self.add_file_policy = add_file_policy
        self._project = self._wandb_init.get("project")
        self._id = self._wandb_init.get("id")
        self._checkpoint_name = checkpoint_name

    @property
    @rank_zero_only
    def experiment(self) -> Any:
        """The ``wandb.Run``; ``wandb.init`` is called on first use (on rank 0 only)."""
        if self._experiment is None:
            import wandb

            if self._offline:
                os.environ["WANDB_MODE"] = "offline"
            if wandb.run is not None:
                self._experiment = wandb.run  # a run already in progress in this process is reused
            else:
                self._experiment = wandb.init(**self._wandb_init)
                if getattr(self._experiment, "define_metric", None):
                    if self._wandb_init.get("sync_tensorboard"):
                        self._experiment.define_metric("*", step_metric="global_step")
                    else:
                        self._experiment.define_metric("trainer/global_step")
                        self._experiment.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return self._experiment

    @property
    def save_dir(self) -> str | None:
        return self._wandb_init.get("dir")

    @property
    def name(self) -> str | None:  # type: ignore[override]
        """The project (not the run's display name: that is ``logger.experiment.name``)."""
        return self._project

    @property
    def version(self) -> str | None:  # type: ignore[override]
        """The run id if the run exists, else the id given to the constructor."""
        return self._experiment.id if self._experiment is not None else self._id

    @property
    def version_if_chosen(self) -> str | None:
        return self.version

    def use_version(self, version: int | str | None) -> None:
        """Log into run ``version`` (resumed with ``resume="allow"``); ``ddp_spawn`` hands back rank 0's run."""
        if version is not None and self._experiment is None:
            self._id = self._wandb_init["id"] = str(version)

    @property
    def log_dir(self) -> str:
        """The run's directory (``<save_dir>/wandb/<offline-|>run-<date>-<id>/files``); ``save_dir`` off rank 0."""
        experiment = self.experiment
        return str(experiment.dir) if experiment is not None else str(self.save_dir or ".")

    def watch(self, model: Any, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        params = as_mapping(params)
        self.experiment.config.update(_plain(dict(params)), allow_val_change=True)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        metrics = prefixed(self._prefix, metrics, self.LOGGER_JOIN_CHAR)
        if step is not None and not self._wandb_init.get("sync_tensorboard"):
            self.experiment.log(dict(metrics, **{"trainer/global_step": step}))
        else:
            self.experiment.log(metrics)

    @rank_zero_only
    def log_table(self, key: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None) -> None:
        """Log a ``wandb.Table`` from ``columns`` and ``data`` or from a ``dataframe``."""
        import wandb

        self.log_metrics({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)  # type: ignore[arg-type]

    def log_text(self, key: str, columns: list[str] | None = None, data: list[list[str]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:
        """Log text as a table."""
        self.log_table(key, columns, data, dataframe, step)

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log images (tensors, arrays, PIL images or paths); ``kwargs`` are lists, one item per image."""
        import wandb

        if not isinstance(images, list):
            raise TypeError(f'Expected a list as "images", found {type(images)}')
        for name, values in kwargs.items():
            if len(values) != len(images):
                raise ValueError(f"Expected {len(images)} items but only found {len(values)} for {name}")
        per_image = [{name: kwargs[name][index] for name in kwargs} for index in range(len(images))]
        self.log_metrics({key: [wandb.Image(image, **extra) for image, extra in zip(images, per_image,
                                                                                      strict=True)]}, step)

    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        """Record that this run uses ``artifact``; returns the ``wandb.Artifact``."""
        return self.experiment.use_artifact(artifact, type=artifact_type)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after ``checkpoint_callback`` (a ``ModelCheckpoint``) saved: log it now or remember it."""
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._scan_and_log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callbacks[id(checkpoint_callback)] = checkpoint_callback

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if status != "success":
            return  # as in Lightning, checkpoints are logged on success only
        if self._experiment is not None:
            for checkpoint_callback in self._checkpoint_callbacks.values():
                self._scan_and_log_checkpoints(checkpoint_callback)

    @rank_zero_only
    def _scan_and_log_checkpoints(self, checkpoint_callback: Any) -> None:
        import wandb

        for mtime, path in new_checkpoints(checkpoint_callback, self._logged_model_time):
            metadata = checkpoint_metadata(checkpoint_callback, path, type(checkpoint_callback).__name__, (
                "monitor", "mode", "save_last", "save_top_k", "save_weights_only", "every_n_train_steps"))
            if not self._checkpoint_name:
                self._checkpoint_name = f"model-{self.experiment.id}"
            artifact = wandb.Artifact(name=self._checkpoint_name, type="model", metadata=metadata)
            artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
            aliases = ["latest", "best"] if path == checkpoint_callback.best_model_path else ["latest"]
            self.experiment.log_artifact(artifact, aliases=aliases)
            self._logged_model_time[path] = mtime

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._experiment is not None:  # reattach to the same run id in the other process
            state["_id"] = state["_wandb_init"]["id"] = self._experiment.id
        state["_experiment"] = None
        return state

    def __repr__(self) -> str:
        return f"WandbLogger(project={self._project!r}, save_dir={self.save_dir!r}, version={self.version!r})"
