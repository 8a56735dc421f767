"""A checksum sealed into every checkpoint file this project writes, verified before a byte of it is used.

``torch.save`` writes a zip archive. :class:`ChecksumWriter` passes its bytes through to the file while hashing
them (xxHash's XXH3, 64 bits: about 6 GB/s on one core here, so a save costs one more pass over bytes already in
the cache) and then stores the digest as the archive's *comment*, the field zip readers skip: plain ``torch.load``
and any zip tool still read the file, and nothing is added to the checkpoint's own keys.

:func:`verify_file` recomputes the digest over everything but the comment and raises
:class:`core.CheckpointError` when a single bit differs, naming the tensors whose bytes changed (each record of the
archive keeps the CRC-32 of its original bytes, and the loaded tensor whose bytes give the damaged record's CRC is
the one hit). A file without the comment (written by plain ``torch.save``, or by core before 0.1.x sealed files)
is loaded unverified. A single flipped bit cannot pass unnoticed: it lands either in the hashed bytes, or in the
digest, or in the two fields that mark the comment as ours (the end record's signature and the comment's length,
and the comment's prefix), which must agree.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import zipfile
import zlib
from collections.abc import Callable
from typing import IO, Any, Final

from core._errors import CheckpointError

ALGORITHM: Final = "xxh3_64"
_PREFIX: Final = b"core-checksum xxh3_64 "
TRAILER_SIZE: Final = len(_PREFIX) + 16
"""Bytes of the archive comment that holds the digest (its prefix, then 16 hexadecimal digits)."""

_END_SIGNATURE: Final = b"PK\x05\x06"
_END_SIZE: Final = 22  # a zip's end-of-central-directory record without its comment; the last 2 bytes: its length
_CHUNK: Final = 8 << 20


def _new_hash() -> Any:
    import xxhash  # a C extension, imported when a checkpoint is written or read, never by ``import core``

    return xxhash.xxh3_64()


class ChecksumWriter:
    """A write-only binary file for ``torch.save`` that hashes what it forwards to ``handle``; :meth:`seal` ends it.

    The last 22 bytes are held back until :meth:`seal`, which checks that they are the archive's end record and
    writes them with the comment's length, followed by the comment.
    """

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._hash = _new_hash()
        self._tail = b""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        if len(self._tail) + len(view) <= _END_SIZE:
            self._tail += view.tobytes()
            return len(view)
        if len(view) >= _END_SIZE:
            self._forward(self._tail)
            self._forward(view[: len(view) - _END_SIZE])
            self._tail = view[len(view) - _END_SIZE :].tobytes()
        else:
            joined = self._tail + view.tobytes()
            self._forward(joined[: len(joined) - _END_SIZE])
            self._tail = joined[len(joined) - _END_SIZE :]
        return len(view)

    def _forward(self, data: bytes | memoryview) -> None:
        if len(data):
            self._hash.update(data)
            self._handle.write(data)

    def flush(self) -> None:
        self._handle.flush()

    def seal(self) -> str:
        """Write the end record and the comment holding the digest; return the digest (hexadecimal)."""
        tail = self._tail
        if len(tail) != _END_SIZE or not tail.startswith(_END_SIGNATURE) or tail[-2:] != b"\x00\x00":
            raise CheckpointError(
                "torch.save did not end the checkpoint with a zip end record, so no checksum could be sealed into "
                "it: was torch.save called with _use_new_zipfile_serialization=False? Nothing was written."
            )
        self._hash.update(tail)
        digest = str(self._hash.hexdigest())
        self._handle.write(tail[:-2] + struct.pack("<H", TRAILER_SIZE) + _PREFIX + digest.encode("ascii"))
        return digest


def _read_range(source: IO[bytes], start: int, length: int) -> bytes:
    source.seek(start)
    return source.read(length)


def verify_file(source: IO[bytes], where: str, load: Callable[[IO[bytes]], Any] | None = None) -> bool:
    """Check the sealed checksum of the checkpoint file ``source`` (seekable); ``False`` when it has none.

    :param where: The path or URL, for messages.
    :param load: Loads the (damaged) file, to name the tensors whose bytes changed; without it, only the records.
    :raises core.CheckpointError: the content differs from what was written, naming what changed.
    """
    size = source.seek(0, os.SEEK_END)
    if size < _END_SIZE + TRAILER_SIZE:
        return False
    last = _read_range(source, size - _END_SIZE - TRAILER_SIZE, _END_SIZE + TRAILER_SIZE)
    end, comment = last[:_END_SIZE], last[_END_SIZE:]
    marked_by_record = end.startswith(_END_SIGNATURE) and end[-2:] == struct.pack("<H", TRAILER_SIZE)
    marked_by_comment = comment.startswith(_PREFIX)
    if not (marked_by_record or marked_by_comment):
        source.seek(0)
        return False
    expected = comment[len(_PREFIX):]
    if not (marked_by_record and marked_by_comment and _is_hex(expected)):
        raise CheckpointError(
            f"The checkpoint {where!r} is corrupt: the end of the file, where its {ALGORITHM} checksum is kept, is "
            f"damaged. Nothing was loaded; restore it from a copy or use an earlier checkpoint."
        )
    digest = _new_hash()  # the hashed bytes end with the comment's length, hashed as 0
    _hash_range(digest, source, 0, size - TRAILER_SIZE - 2)
    digest.update(b"\x00\x00")
    source.seek(0)
    if digest.hexdigest().encode("ascii") == expected:
        return True
    raise CheckpointError(
        f"The checkpoint {where!r} is corrupt: its content does not match the {ALGORITHM} checksum written with it; "
        f"{_what_changed(source, load)}. Nothing was loaded; restore it from a copy or use an earlier checkpoint."
    )


def _is_hex(text: bytes) -> bool:
    return len(text) == 16 and all(character in b"0123456789abcdef" for character in text)


def _what_changed(source: IO[bytes], load: Callable[[IO[bytes]], Any] | None) -> str:
    """Which records of the archive (and so which tensors) hold the changed bytes, as far as can be told."""
    try:
        damaged = _damaged_records(source)
    except Exception:  # the archive's own directory is unreadable
        return "the archive's directory is damaged"
    finally:
        source.seek(0)
    if not damaged:
        return ("the changed bytes are outside the tensors and the pickled structure (the archive's headers or the "
                "checksum)")
    data = {name: crc for name, crc in damaged.items() if "/data/" in name}
    parts = []
    if len(data) < len(damaged):
        parts.append("the pickled structure (" + ", ".join(sorted(set(damaged) - set(data))) + ")")
    if data:
        names = _tensors_with_crc(source, load, set(data.values())) if load is not None else []
        records = ", ".join(sorted(data))
        parts.append(f"the tensor {' / '.join(names)} ({records})" if names else f"the tensor data {records}")
    return "the changed bytes are in " + " and ".join(parts)


def _damaged_records(source: IO[bytes]) -> dict[str, int]:
    """Record name -> CRC-32 of its bytes as they are now, for each record whose CRC differs from the directory's."""
    damaged = {}
    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            source.seek(info.header_offset)
            header = source.read(30)
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            source.seek(info.header_offset + 30 + name_length + extra_length)
            crc = zlib.crc32(source.read(info.compress_size))
            if crc != info.CRC:
                damaged[info.filename] = crc
    return damaged


def _tensors_with_crc(source: IO[bytes], load: Callable[[IO[bytes]], Any], crcs: set[int]) -> list[str]:
    from core.toolkit._collections import named_tensors

    try:
        loaded = load(source)
    except Exception:
        return []
    finally:
        source.seek(0)
    return [repr(name) for name, tensor in named_tensors(loaded) if _storage_crc(tensor) in crcs]


def _storage_crc(tensor: Any) -> int:
    """CRC-32 of the bytes of ``tensor``'s whole storage (what one record of the archive holds), read in place."""
    storage = tensor.untyped_storage().cpu()
    if storage.nbytes() == 0:
        return zlib.crc32(b"")
    return zlib.crc32((ctypes.c_char * storage.nbytes()).from_address(storage.data_ptr()))


# ------------------------------------------------------------------------------------------------------------
# A checkpoint directory (DCP's: one file per rank plus .metadata): a checksum file beside the data.

DIRECTORY_FILE: Final = ".checksums"
"""The file, inside a checkpoint directory, that lists each file's digest (and each tensor's, where known)."""

Item = tuple[str, int, int]
"""A named byte range of a file: (tensor name, offset, length)."""


def _hash_range(digest: Any, handle: IO[bytes], offset: int, length: int) -> None:
    """Feed ``length`` bytes of ``handle`` from ``offset`` into ``digest``, a chunk at a time (fewer at the end)."""
    handle.seek(offset)
    while length > 0:
        chunk = handle.read(min(_CHUNK, length))
        if not chunk:
            break
        digest.update(chunk)
        length -= len(chunk)


def _digest_range(handle: IO[bytes], offset: int, length: int) -> str:
    digest = _new_hash()
    _hash_range(digest, handle, offset, length)
    return str(digest.hexdigest())


def seal_directory(directory: str | os.PathLike[str], items: dict[str, list[Item]] | None = None) -> None:
    """Write :data:`DIRECTORY_FILE` into ``directory``: the digest of every file in it, and of each named range.

    :param items: For some files (by name relative to ``directory``), the byte ranges of the tensors they hold, so
        that :func:`verify_directory` can name a damaged tensor, not only its file.
    """
    root = os.fspath(directory)
    files: dict[str, Any] = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name == DIRECTORY_FILE or not os.path.isfile(path):
            continue
        with open(path, "rb") as handle:
            entry: dict[str, Any] = {"digest": _digest_range(handle, 0, os.path.getsize(path))}
            named = (items or {}).get(name)
            if named:
                entry["items"] = [[tensor, offset, length, _digest_range(handle, offset, length)]
                                  for tensor, offset, length in named]
        files[name] = entry
    body = json.dumps({"algorithm": ALGORITHM, "files": files}, sort_keys=True, separators=(",", ":"))
    digest = _new_hash()
    digest.update(body.encode("utf-8"))
    with open(os.path.join(root, DIRECTORY_FILE), "w", encoding="utf-8") as handle:
        handle.write(f"{body}\n{digest.hexdigest()}\n")
        handle.flush()
        os.fsync(handle.fileno())


def verify_directory(directory: str | os.PathLike[str], where: str) -> bool:
    """Check every file of a directory sealed by :func:`seal_directory`; ``False`` when it has no checksum file.

    :raises core.CheckpointError: a file is missing or differs from what was written, naming it and, where the
        seal knows the ranges, the tensors whose bytes changed.
    """
    root = os.fspath(directory)
    listing = os.path.join(root, DIRECTORY_FILE)
    if not os.path.isfile(listing):
        return False
    files = _read_listing(listing, where)
    for name, entry in sorted(files.items()):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            raise CheckpointError(
                f"The checkpoint {where!r} is incomplete: its file {name!r}, listed in {DIRECTORY_FILE} when it was "
                f"written, is missing. Nothing was loaded; restore the directory from a copy or use an earlier one."
            )
        with open(path, "rb") as handle:
            if _digest_range(handle, 0, os.path.getsize(path)) == entry["digest"]:
                continue
            changed = [repr(tensor) for tensor, offset, length, digest in entry.get("items", [])
                       if _digest_range(handle, offset, length) != digest]
        inside = f"the entry {' / '.join(changed)}" if changed else "bytes outside the entries it lists"
        raise CheckpointError(
            f"The checkpoint {where!r} is corrupt: its file {name!r} does not match the {ALGORITHM} checksum written "
            f"with it; the changed bytes are in {inside}. Nothing was loaded; restore it from a copy or use an "
            f"earlier checkpoint."
        )
    return True


def _read_listing(listing: str, where: str) -> dict[str, Any]:
    damaged = CheckpointError(
        f"The checkpoint {where!r} is corrupt: its {DIRECTORY_FILE} file, which holds the checksums of its files, is "
        f"damaged. Nothing was loaded; restore it from a copy or use an earlier checkpoint."
    )
    with open(listing, "rb") as handle:
        content = handle.read()
    lines = content.split(b"\n")
    if len(lines) != 3 or lines[2] != b"":
        raise damaged
    digest = _new_hash()
    digest.update(lines[0])
    if digest.hexdigest().encode("ascii") != lines[1]:
        raise damaged
    try:
        parsed = json.loads(lines[0])
    except ValueError:
        raise damaged from None
    files = parsed.get("files") if isinstance(parsed, dict) and parsed.get("algorithm") == ALGORITHM else None
    if not isinstance(files, dict):
        raise damaged
    return files
