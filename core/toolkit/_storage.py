"""Where checkpoint bytes go: a local path, or any URL an installed ``fsspec`` implementation understands.

Plain paths and ``file://`` URLs take the local route: a temporary file in the target's directory,
``fsync``, then ``os.replace``, which is atomic on POSIX. Every other URL (``memory://``, ``s3://``, ...)
goes through ``fsspec``: the bytes are written to a hidden temporary sibling which is then moved over the
target, so a reader never sees a half-written file where the filesystem can move (local-like and
in-memory filesystems; object stores make the final object visible only once it is complete anyway).
``fsspec`` is imported only when a URL is used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

from core._errors import ConfigurationError

LOCAL_PROTOCOL: Final = "file://"


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A temporary file is created private (0600); the checkpoint gets the mode a plain open() would give it.
_FILE_MODE: Final = 0o666 & ~_read_umask()


def is_url(path: str) -> bool:
    """Whether ``path`` names a protocol (``memory://x``); ``file://`` URLs count as URLs too."""
    head, separator, _ = path.partition("://")
    return bool(separator) and head.replace("+", "").replace("-", "").isalnum()


def local_path(path: str) -> Path | None:
    """The local path behind ``path`` (a plain path or a ``file://`` URL), ``None`` for other protocols."""
    if path.startswith(LOCAL_PROTOCOL):
        return Path(path[len(LOCAL_PROTOCOL):])
    return None if is_url(path) else Path(path)


def filesystem(path: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    """The ``fsspec`` filesystem for a URL and the path inside it."""
    try:
        import fsspec
    except ImportError as error:  # fsspec comes with torch; a stripped environment may lack it
        raise ConfigurationError(
            f"The checkpoint path {path!r} is a URL, which needs fsspec: pip install fsspec."
        ) from error
    try:
        return fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ImportError, ValueError) as error:
        protocol = path.partition("://")[0]
        raise ConfigurationError(
            f"No usable fsspec implementation for the protocol {protocol!r} of {path!r}: {error}. Install the "
            f"package that provides it (for example s3fs for s3://, gcsfs for gs://)."
        ) from error


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_local(target: Path, write: Callable[[IO[bytes]], None]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # delete=False: the file must outlive the handle so that os.replace can move it into place.
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, _FILE_MODE)
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _write_remote(path: str, write: Callable[[IO[bytes]], None], storage_options: dict[str, Any] | None) -> None:
    fs, target = filesystem(path, storage_options)
    parent, _, name = target.rpartition("/")
    temporary = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp" if parent else f".{name}.{uuid.uuid4().hex}.tmp"
    if parent:
        fs.makedirs(parent, exist_ok=True)
    try:
        with fs.open(temporary, "wb") as handle:
            write(handle)
        fs.mv(temporary, target)
    except BaseException:
        if fs.exists(temporary):
            fs.rm(temporary)
        raise


def atomic_write(path: str, write: Callable[[IO[bytes]], None], storage_options: dict[str, Any] | None = None) -> None:
    """Call ``write`` with a binary file whose content replaces ``path`` in one step, or not at all."""
    local = local_path(path)
    if local is None:
        _write_remote(path, write, storage_options)
    else:
        _write_local(local, write)


@contextmanager
def open_for_reading(path: str, storage_options: dict[str, Any] | None = None) -> Iterator[IO[bytes]]:
    """A binary file to read ``path`` from; ``FileNotFoundError`` when there is nothing there."""
    local = local_path(path)
    if local is not None:
        with open(local, "rb") as handle:
            yield handle
        return
    fs, target = filesystem(path, storage_options)
    if not fs.isfile(target):
        raise FileNotFoundError(path)
    with fs.open(target, "rb") as handle:
        yield handle


def exists(path: str, storage_options: dict[str, Any] | None = None) -> bool:
    local = local_path(path)
    if local is not None:
        return local.exists()
    fs, target = filesystem(path, storage_options)
    return bool(fs.exists(target))


def list_names(path: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The names of the entries directly inside the directory ``path`` (empty when it does not exist)."""
    local = local_path(path)
    if local is not None:
        return sorted(entry.name for entry in local.iterdir()) if local.is_dir() else []
    fs, target = filesystem(path, storage_options)
    if not fs.isdir(target):
        return []
    return sorted(str(entry).rstrip("/").rpartition("/")[2] for entry in fs.ls(target, detail=False))


def remove(path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Delete a file or a directory tree; nothing happens when ``path`` does not exist."""
    local = local_path(path)
    if local is not None:
        if local.is_dir() and not local.is_symlink():
            shutil.rmtree(local)
        else:
            local.unlink(missing_ok=True)
        return
    fs, target = filesystem(path, storage_options)
    if fs.exists(target):
        fs.rm(target, recursive=True)


def join(directory: str, *names: str) -> str:
    """``directory/name/...`` for local paths and URLs alike."""
    if local_path(directory) is not None and not directory.startswith(LOCAL_PROTOCOL):
        return os.path.join(directory, *names)
    return "/".join([directory.rstrip("/"), *names])
