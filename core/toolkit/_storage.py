"""Where checkpoint bytes go: a local path, or any URL an installed ``fsspec`` implementation understands.

Plain paths and ``file://`` URLs take the local route: a temporary file in the target's directory,
``fsync``, then ``os.replace``, which is atomic on POSIX. Every other URL (``memory://``, ``s3://``, ...)
goes through ``fsspec``: the bytes are written to a hidden temporary sibling which is then moved over the
target, so a reader never sees a half-written file where the filesystem can move (local-like and
in-memory filesystems; object stores make the final object visible only once it is complete anyway).
``fsspec`` is imported only when a URL is used.

A save that fails because the filesystem is full (``ENOSPC``, ``EDQUOT`` or ``EFBIG``, however deep in the error's
chain, as torch's zip writer reports it as ``unexpected pos``) is a :class:`core.CheckpointError` naming the cause:
the errno, the bytes needed (or written before it filled), the bytes free and the filesystem the path is on
(:func:`no_space_error`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

from core._errors import CheckpointError, ConfigurationError

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


def _write_local(target: Path, write: Callable[[IO[bytes]], None], needed: Callable[[], int | None] | None) -> None:
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
    except BaseException as error:
        written = _size_of(Path(handle.name))
        Path(handle.name).unlink(missing_ok=True)
        cause = full_disk_cause(error)
        if cause is not None:
            raise no_space_error(str(target), cause, needed=needed() if needed else None, written=written) from error
        raise
    _fsync_directory(target.parent)


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


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


def atomic_write(
    path: str,
    write: Callable[[IO[bytes]], None],
    storage_options: dict[str, Any] | None = None,
    *,
    needed: Callable[[], int | None] | None = None,
) -> None:
    """Call ``write`` with a binary file whose content replaces ``path`` in one step, or not at all.

    A full filesystem is a :class:`core.CheckpointError` naming the errno, the bytes written before it filled, the
    bytes ``needed`` (a callable, asked only then, for what the whole content takes) and free, and the filesystem.
    """
    local = local_path(path)
    if local is None:
        try:
            _write_remote(path, write, storage_options)
        except BaseException as error:
            cause = full_disk_cause(error)
            if cause is None:
                raise
            raise no_space_error(path, cause, needed=needed() if needed else None) from error
    else:
        _write_local(local, write, needed)


# -------------------------------------------------------------------------------------------------
# A full filesystem, named
# -------------------------------------------------------------------------------------------------

FULL_DISK_ERRNOS: Final = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""What a write into a full filesystem fails with: no space, quota exceeded, file too large (``ulimit -f``)."""

# Libraries that do their own I/O (safetensors' Rust writer) report the errno only in their message.
_ERRNO_IN_TEXT: Final = re.compile(r"(?:os error|code:|\[Errno) ?(\d+)")
_STRERROR_IN_TEXT: Final = {os.strerror(code): code for code in FULL_DISK_ERRNOS}


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and what an error gathering several failures (DCP's
    ``CheckpointException``: ``failures``, rank -> (exception, traceback)) holds, each once."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [linked for linked in (current.__cause__, current.__context__) if linked is not None]
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):
            for failure in failures.values():
                inner = failure[0] if isinstance(failure, tuple) and failure else failure
                if isinstance(inner, BaseException):
                    pending.append(inner)


def full_disk_cause(error: BaseException) -> OSError | None:
    """The ``OSError`` of a full filesystem behind ``error`` (anywhere in its chain), ``None`` when there is none.

    An error whose message alone says so (``os error 28``, ``No space left on device``) counts, as an ``OSError``
    made from it.
    """
    for linked in _chain(error):
        if isinstance(linked, CheckpointError) and getattr(linked, "full_disk", None) is not None:
            return None  # already names the cause: see no_space_error
        if isinstance(linked, OSError) and linked.errno in FULL_DISK_ERRNOS:
            return linked
    for linked in _chain(error):
        text = str(linked)
        codes = [int(found) for found in _ERRNO_IN_TEXT.findall(text)]
        codes += [code for message, code in _STRERROR_IN_TEXT.items() if message in text]
        for code in codes:
            if code in FULL_DISK_ERRNOS:
                return OSError(code, os.strerror(code))
    return None


def _mount_of(path: Path) -> tuple[str, str, str] | None:
    """(mount point, filesystem type, source) of the mount holding ``path``, from ``/proc/self/mountinfo``."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:  # not Linux
        return None
    resolved, best = str(path.resolve()), None
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, tail[0], tail[1])
    return best


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _amount(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value, shown = float(count), "TiB"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024:
            shown = unit
            break
    return f"{count} bytes ({value:.1f} {shown})"


def no_space_error(path: str, cause: OSError, *, needed: int | None = None,
                   written: int | None = None) -> CheckpointError:
    """The error for a save to ``path`` that failed with ``cause`` (see :func:`full_disk_cause`): the errno, the
    bytes ``needed`` and ``written`` (each where known), the bytes free now and the path's filesystem and mount.

    The error's ``full_disk`` attribute holds ``cause``, so that an outer handler leaves it as it is."""
    code = cause.errno if cause.errno is not None else errno.ENOSPC
    name = errno.errorcode.get(code, str(code))
    amounts = []
    if needed is not None:
        amounts.append(f"it needs about {_amount(needed)}")
    if written is not None:
        amounts.append(f"{_amount(written)} were written before the write failed")
    where = ""
    local = local_path(path)
    if local is not None:
        existing = _existing_ancestor(local)
        try:
            stats = os.statvfs(existing)
            amounts.append(f"{_amount(stats.f_bavail * stats.f_frsize)} are free")
        except OSError:
            pass
        mount = _mount_of(existing)
        where = (f" on the filesystem mounted at {mount[0]} ({mount[1]}, from {mount[2]})" if mount is not None
                 else f" on the filesystem of {existing}")
    limit = (" (or the file size limit of this process, ulimit -f, is reached)" if code == errno.EFBIG else "")
    error = CheckpointError(
        f"The checkpoint {path!r} could not be saved: the filesystem is full (errno {name}: {os.strerror(code)}"
        f"{limit}){'; ' if amounts else ''}{', '.join(amounts)}{where}. Nothing was replaced: a previous checkpoint "
        f"at that path is untouched. Free space there, or save to another filesystem."
    )
    error.full_disk = cause  # type: ignore[attr-defined]
    return error


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
