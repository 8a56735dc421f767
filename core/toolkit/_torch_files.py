"""``torch.save`` made atomic and ``torch.load`` whose failures are :class:`core.CheckpointError`.

Used by the ``torch`` and ``async`` checkpoint_io and by any plugin that writes a single checkpoint file.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import IO, Any, Final

import torch

from core._errors import CheckpointError
from core.toolkit import _storage


def atomic_torch_save(
    checkpoint: Any, path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> None:
    """``torch.save`` to ``path`` (a local path or an fsspec URL) so readers see the old or the whole new file."""

    def write(handle: IO[bytes]) -> None:
        torch.save(checkpoint, handle)

    _storage.atomic_write(os.fspath(path), write, storage_options)


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


def torch_load_from(source: IO[bytes] | str, where: str, map_location: Any, weights_only: bool) -> Any:
    """``torch.load`` from a file or a local path, failures turned into :class:`CheckpointError` naming ``where``.

    A file that does not start like a ``torch.save`` file is reported as not a checkpoint; a damaged one as
    corrupt or truncated; one that asks to run code (with ``weights_only``) as refused.
    """
    foreign = _not_a_checkpoint(source, where)
    if foreign is not None:
        raise foreign
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


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def safe_torch_load(
    path: str | os.PathLike[str],
    map_location: Any,
    weights_only: bool,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """``torch.load`` whose failures are :class:`CheckpointError` naming the file and the way out."""
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
        return torch_load_from(str(local), where, map_location, weights_only)
    try:
        with _storage.open_for_reading(where, storage_options) as handle:
            # Read whole: torch.load seeks, which is slow or unsupported on some remote streams.
            content = io.BytesIO(handle.read())
    except FileNotFoundError:
        raise CheckpointError(f"No checkpoint at {where!r}: the file does not exist.") from None
    return torch_load_from(content, where, map_location, weights_only)
