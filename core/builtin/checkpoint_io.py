"""The ``torch`` checkpoint_io: ``torch.save`` made atomic, ``torch.load`` with ``weights_only=True``.

A save writes to a temporary file in the target's directory, flushes and fsyncs it, then renames it
over the target with ``os.replace``, which is atomic on POSIX: a process killed mid-save leaves the
previous checkpoint intact and at worst a stray ``.*.tmp`` file, never a truncated checkpoint.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import torch

from core._errors import CheckpointError, ConfigurationError
from core._markers import hookimpl


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_torch_save(checkpoint: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to ``path`` so that readers see either the old file or the complete new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # delete=False: the file must outlive the handle so that os.replace can move it into place.
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def safe_torch_load(path: str | os.PathLike[str], map_location: Any, weights_only: bool) -> Any:
    """``torch.load`` whose failures are :class:`CheckpointError` naming the file and the way out."""
    if not Path(path).exists():
        raise CheckpointError(f"No checkpoint at {str(path)!r}: the file does not exist.")
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as error:
        if not weights_only:
            raise CheckpointError(f"The checkpoint {str(path)!r} is corrupt or truncated: {error}") from error
        first_line = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        raise CheckpointError(
            f"Refused to load {str(path)!r}: it holds objects other than tensors and plain containers, "
            f"and loading them would run code from the file ({first_line}). Nothing from it was executed. "
            f"If you trust the file, load it with weights_only=False."
        ) from None
    except (EOFError, RuntimeError) as error:
        raise CheckpointError(f"The checkpoint {str(path)!r} is corrupt or truncated: {error}") from error


class TorchCheckpointIO:
    """One file per checkpoint through ``torch.save`` / ``torch.load``."""

    kind: Final = "checkpoint_io"
    name: Final = "torch"

    @hookimpl
    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        if storage_options is not None:
            raise ConfigurationError(
                f"The 'torch' checkpoint_io takes no storage_options, got {storage_options!r}; use a "
                f"checkpoint_io plugin that understands them."
            )
        atomic_torch_save(checkpoint, path)

    @hookimpl
    def checkpoint_io_load(self, path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
        return safe_torch_load(path, map_location, weights_only)

    @hookimpl
    def checkpoint_io_remove(self, path: str) -> None:
        target = Path(path)
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
