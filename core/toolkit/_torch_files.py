"""``torch.save`` made atomic and ``torch.load`` whose failures are :class:`core.CheckpointError`.

Used by the ``torch`` and ``async`` checkpoint_io and by any plugin that writes a single checkpoint file.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, Final

import torch

from core._errors import CheckpointError, CoreError
from core.toolkit import _storage
from core.toolkit._checksums import ChecksumWriter, verify_file


def atomic_torch_save(
    checkpoint: Any,
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    checksum: bool = True,
) -> None:
    """``torch.save`` to ``path`` (a local path or an fsspec URL) so readers see the old or the whole new file.

    With ``checksum`` (the default) the file carries an xxHash checksum of its bytes in the zip archive's comment,
    which :func:`safe_torch_load` verifies; plain ``torch.load`` reads the file all the same. An object that
    cannot be saved (``torch.save`` cannot pickle it), or a full filesystem (the errno, the bytes needed and free,
    the mount: see :func:`reporting_full_disk`), raises :class:`core.CheckpointError`, and the previous file at
    ``path`` is untouched.
    """
    where = os.fspath(path)

    def write(handle: IO[bytes]) -> None:
        if not checksum:
            torch.save(checkpoint, handle)
            return
        writer = ChecksumWriter(handle)
        torch.save(checkpoint, writer)  # type: ignore[arg-type]  # a write-only binary file is all it needs
        writer.seal()

    try:
        _storage.atomic_write(where, write, storage_options, needed=lambda: tensor_bytes(checkpoint))
    except (CoreError, OSError):
        raise
    except Exception as error:  # torch.save's pickling failures: AttributeError, TypeError, PicklingError, ...
        raise CheckpointError(
            f"The checkpoint could not be saved to {where!r}: {type(error).__name__}: {_first_line(error)}. Nothing "
            f"was written there (a previous checkpoint at that path is untouched); save only tensors, containers and "
            f"plain values, or objects torch.save can pickle (not local functions or classes, lambdas, open files)."
        ) from error


def tensor_bytes(value: Any) -> int:
    """The bytes of the tensors in ``value`` (nested dicts, lists, tuples, and objects with a ``state_dict``), each
    storage counted once: about what a checkpoint of it takes on disk."""
    storages: dict[tuple[int, int], int] = {}

    def visit(item: Any, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(item, torch.Tensor):
            to_local = getattr(item, "to_local", None)  # a DTensor: this rank's shard
            local: torch.Tensor = to_local() if callable(to_local) else item
            if local.layout != torch.strided or local.is_meta:
                return
            storage = local.untyped_storage()
            storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        elif isinstance(item, dict):
            for child in item.values():
                visit(child, depth + 1)
        elif isinstance(item, (list, tuple)):
            for child in item:
                visit(child, depth + 1)
        elif callable(getattr(item, "state_dict", None)):
            visit(item.state_dict(), depth + 1)

    visit(value, 0)
    return sum(storages.values())


@contextmanager
def reporting_full_disk(path: str | os.PathLike[str], checkpoint: Any = None) -> Iterator[None]:
    """A save of ``checkpoint`` to ``path`` inside the block that fails on a full filesystem raises
    :class:`core.CheckpointError` naming the cause: the errno (``ENOSPC``, ``EDQUOT``, ``EFBIG``), the bytes the
    checkpoint's tensors need, the bytes free and the filesystem and mount of ``path``.

    The cause is found however deep it is: an ``OSError`` in the error's chain (torch's zip writer reports it as
    ``unexpected pos``), one rank's failure inside DCP's ``CheckpointException``, or a library's message (``os
    error 28``). Other errors pass unchanged. Wrap the whole save, cleanup included, so that the free space it
    reports is what a new save would find."""
    try:
        yield
    except BaseException as error:
        cause = _storage.full_disk_cause(error)
        if cause is None:
            raise
        raise _storage.no_space_error(os.fspath(path), cause, needed=tensor_bytes(checkpoint)) from error


def _refused(where: str, error: pickle.UnpicklingError) -> CheckpointError:
    first_line = str(error).strip().splitlines()[-1] if str(error).strip() else ""
    return CheckpointError(
        f"Refused to load {where!r}: it holds objects other than tensors and plain containers, "
        f"and loading them would run code from the file ({first_line}). Nothing from it was executed. "
        f"If you trust the file, load it with weights_only=False."
    )


# What torch.save writes: a zip archive (since torch 1.6), or the legacy format (a pickle of the magic number).
_ZIP_MAGIC: Final = b"PK\x03\x04"
_LEGACY_MAGIC: Final = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
# torch's weights_only unpickler says these when the file asks for code, not when its bytes are damaged.
_CODE_REQUESTS: Final = ("Unsupported global", "GLOBAL", "was not an allowed global", "Unsupported class")


def _not_a_checkpoint(source: IO[bytes] | str, where: str) -> CheckpointError | None:
    """An error when the file does not start like anything ``torch.save`` writes, else None."""
    if isinstance(source, str):
        with open(source, "rb") as handle:
            head = handle.read(len(_LEGACY_MAGIC))
    else:
        position = source.tell()
        head = source.read(len(_LEGACY_MAGIC))
        source.seek(position)
    if head.startswith(_ZIP_MAGIC) or head.startswith(_LEGACY_MAGIC):
        return None
    shown = head[:8].hex(" ") if head else "nothing: the file is empty"
    return CheckpointError(
        f"{where!r} is not a checkpoint: torch.save writes a zip archive (or its legacy format), and this file "
        f"starts with {shown}. Check the path; a checkpoint written by every rank of a sharded run is a directory, "
        f"read with the 'distributed' checkpoint_io (pip install core-dcp)."
    )


def torch_load_from(
    source: IO[bytes] | str, where: str, map_location: Any, weights_only: bool, *, verify: bool = True
) -> Any:
    """``torch.load`` from a file or a local path, failures turned into :class:`CheckpointError` naming ``where``.

    A file that does not start like a ``torch.save`` file is reported as not a checkpoint; one whose checksum
    (written by :func:`atomic_torch_save`) does not match its bytes as corrupt, naming the changed tensors, before
    anything is unpickled (``verify=False`` skips the check); a damaged one without a checksum as corrupt or
    truncated; one that asks to run code (with ``weights_only``) as refused.
    """
    foreign = _not_a_checkpoint(source, where)
    if foreign is not None:
        raise foreign
    if verify:
        _verify(source, where, weights_only)
    try:
        return torch.load(source, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as error:
        if weights_only and any(marker in str(error) for marker in _CODE_REQUESTS):
            raise _refused(where, error) from None
        raise CheckpointError(f"The checkpoint {where!r} is corrupt or truncated: {_first_line(error)}") from error
    except Exception as error:  # zip, storage and decoding errors of a damaged file all mean the same to a user
        raise CheckpointError(
            f"The checkpoint {where!r} is corrupt or truncated ({type(error).__name__}: {_first_line(error)})"
        ) from error


def _verify(source: IO[bytes] | str, where: str, weights_only: bool) -> None:
    def load(handle: IO[bytes]) -> Any:
        return torch.load(handle, map_location="cpu", weights_only=weights_only)

    if isinstance(source, str):
        with open(source, "rb") as handle:
            verify_file(handle, where, load)
    else:
        position = source.tell()
        verify_file(source, where, load)
        source.seek(position)


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def safe_torch_load(
    path: str | os.PathLike[str],
    map_location: Any,
    weights_only: bool,
    storage_options: dict[str, Any] | None = None,
    *,
    verify: bool = True,
) -> Any:
    """``torch.load`` whose failures are :class:`CheckpointError` naming the file and the way out.

    The file's checksum is verified first when it has one (see :func:`torch_load_from`; ``verify=False`` skips it).
    """
    where = os.fspath(path)
    local = _storage.local_path(where)
    if local is not None:
        if local.is_dir():
            raise CheckpointError(
                f"{where!r} is a directory, not a checkpoint file. A sharded checkpoint written by every rank is "
                f"read with the 'distributed' checkpoint_io: plugins=['distributed'] (pip install core-dcp)."
            )
        if not local.is_file():
            raise CheckpointError(f"No checkpoint at {where!r}: the file does not exist.")
        return torch_load_from(str(local), where, map_location, weights_only, verify=verify)
    try:
        with _storage.open_for_reading(where, storage_options) as handle:
            # Read whole: torch.load seeks, which is slow or unsupported on some remote streams.
            content = io.BytesIO(handle.read())
    except FileNotFoundError:
        raise CheckpointError(f"No checkpoint at {where!r}: the file does not exist.") from None
    return torch_load_from(content, where, map_location, weights_only, verify=verify)
