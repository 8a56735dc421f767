"""``Logger``: where the Trainer sends logged metrics and hyperparameters.

The Trainer calls a logger on global rank 0 only, at logging steps (``log_every_n_steps``) and at the end
of each epoch, validation and test; values are plain floats by then. Each run writes into its own
``<save_dir>/<name>/version_<n>`` directory unless a version is given. ``save_dir`` may be a URL
(``memory://``, ``s3://``, ...): files are then written through ``fsspec``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from argparse import Namespace
from collections.abc import Mapping
from typing import IO, Any, ClassVar

__all__ = ["Logger"]


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``memory://runs``) rather than a local path."""
    from core.toolkit import is_url as url

    return "://" in path and url(path)


def list_dir(path: str) -> list[str]:
    """The names inside the directory ``path`` (a local path or a URL); empty when it does not exist."""
    if is_url(path):
        from core.toolkit import list_names

        return list_names(path)
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def make_dirs(path: str) -> None:
    """Create the directory ``path`` and its parents (a local path or a URL)."""
    if is_url(path):
        from core.toolkit import filesystem

        fs, target = filesystem(path, None)
        fs.makedirs(target, exist_ok=True)
    else:
        os.makedirs(path, exist_ok=True)


def open_text(path: str, mode: str) -> IO[str]:
    """The text file ``path`` (a local path or a URL, through fsspec) opened in ``mode``, newlines untranslated."""
    if is_url(path):
        from core.toolkit import filesystem

        fs, target = filesystem(path, None)
        return fs.open(target, mode, newline="")
    return open(path, mode, newline="")


def next_version(root: str) -> int:
    """One more than the highest ``version_<n>`` directory under ``root`` (0 when there is none)."""
    names = list_dir(root)
    numbers = [int(match.group(1)) for name in names if (match := re.fullmatch(r"version_(\d+)", name))]
    return max(numbers, default=-1) + 1


def as_mapping(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    """Hyperparameters as a dict: an ``argparse.Namespace`` (Lightning programs pass ``args``) by its attributes."""
    if params is None:
        return {}
    return dict(vars(params)) if isinstance(params, Namespace) else dict(params)


class Logger:
    """Base class of loggers.

    :param save_dir: The root directory of every run's logs; ``None`` (a logger of your own that keeps no files):
        the Trainer's ``default_root_dir``, once a run adopts the logger (:meth:`adopt_save_dir`).
    :param name: A subdirectory for this experiment.
    :param version: A number (``version_<n>``) or a name; ``None`` takes the next free number when the
        logger first writes.
    :cvar hparams_file: The file :meth:`log_hyperparams` writes in :attr:`log_dir`: JSON, or YAML for a name
        ending in ``.yaml`` (Lightning's loggers write ``hparams.yaml``).
    """

    hparams_file: ClassVar[str] = "hparams.json"

    def __init__(
        self, save_dir: str | os.PathLike[str] | None = None, name: str | None = "logs",
        version: int | str | None = None,
    ) -> None:
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._name = name or ""  # None or "": runs go straight into save_dir/version_<n>
        self._version = version

    @property
    def save_dir(self) -> str | None:
        """The root of every run's logs (the working directory until a Trainer gives a logger without one its
        ``default_root_dir``). A subclass that keeps no files may answer ``None``, as Lightning's may."""
        return self._save_dir if self._save_dir is not None else os.getcwd()

    def _root(self) -> str:
        """:attr:`save_dir`, or where a logger that answers ``None`` keeps its run directory (the Trainer's
        ``default_root_dir`` once adopted; Lightning puts such a logger's checkpoints there too)."""
        save_dir = self.save_dir
        if save_dir is None:
            save_dir = self._save_dir if self._save_dir is not None else os.getcwd()
        return save_dir

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the directory of every version of this experiment."""
        return os.path.join(self._root(), self.name)

    def adopt_save_dir(self, directory: str | os.PathLike[str]) -> None:
        """Take ``directory`` as :attr:`save_dir` if none was given (the Trainer's ``default_root_dir``)."""
        if self._save_dir is None:
            self._save_dir = os.fspath(directory)

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        """The version of this run; chosen (and fixed) on first use."""
        if self._version is None:
            self._version = next_version(os.path.join(self._root(), self._name))
        return self._version

    @property
    def version_if_chosen(self) -> int | str | None:
        """The version if it is fixed (given, or chosen on first use), else ``None``; reading it chooses none."""
        return self._version

    def use_version(self, version: int | str | None) -> None:
        """Write into ``version`` from now on (``None``: choose one on first use).

        A Trainer run in other processes (``ddp_spawn``) hands back this way the version its rank 0 chose.
        """
        self._version = version

    @property
    def log_dir(self) -> str:
        """Where this run's files go: ``<save_dir>/<name>/version_<n>`` (or ``.../<version>`` for a name)."""
        version = self.version
        folder = f"version_{version}" if isinstance(version, int) else str(version)
        return os.path.join(self._root(), str(self.name), folder)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record ``metrics`` at ``step`` (the number of optimizer steps taken so far; the Trainer always gives it)."""
        raise NotImplementedError

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Record the run's hyperparameters (a mapping or an ``argparse.Namespace``); by default as
        :attr:`hparams_file` in :attr:`log_dir`."""
        params = as_mapping(params)
        make_dirs(self.log_dir)
        # Plain values as they are, anything else as its repr; JSON is also valid YAML, so without pyyaml a
        # ``.yaml`` file still reads back with any YAML reader.
        plain = json.loads(json.dumps(dict(params), default=repr))
        with open_text(os.path.join(self.log_dir, self.hparams_file), "w") as file:
            if self.hparams_file.endswith(".yaml") and importlib.util.find_spec("yaml") is not None:
                import yaml

                yaml.safe_dump(plain, file, sort_keys=True)
            else:
                json.dump(plain, file, indent=2, sort_keys=True)

    def save(self) -> None:
        """Write out what is buffered."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """``checkpoint_callback`` (a ``ModelCheckpoint``) has just saved, on every rank; a logger that uploads
        checkpoints (MLflow, W&B) reads its ``best_model_path`` and ``best_k_models`` here. Does nothing by default."""

    def finalize(self, status: str) -> None:
        """The run ended (``status`` is ``"success"`` or ``"failed"``): write out and close."""
        self.save()

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(save_dir={self._save_dir!r}, name={self._name!r}, version={self._version!r})"
