"""The ``torch`` checkpoint_io: ``torch.save`` made atomic, ``torch.load`` with ``weights_only=True``.

A local save writes to a temporary file in the target's directory, flushes and fsyncs it, then renames it
over the target with ``os.replace``, which is atomic on POSIX: a process killed mid-save leaves the
previous checkpoint intact and at worst a stray ``.*.tmp`` file, never a truncated checkpoint.

A path with a protocol (``memory://``, ``file://``, ``s3://``: whatever ``fsspec`` implementation is
installed) goes through ``fsspec``; see :func:`core.toolkit.atomic_write` for what atomic means there. Options for the
filesystem (credentials, endpoints) are given once, ``TorchCheckpointIO(storage_options={...})``, or per
save through the hook's ``storage_options``.
"""

from __future__ import annotations

from typing import Any, Final

from core._errors import ConfigurationError
from core._markers import hookimpl
from core.toolkit import local_path, remove_path
from core.toolkit.checkpoint import atomic_torch_save, safe_torch_load


def _check_options(path: str, storage_options: Any | None, owner: str) -> dict[str, Any] | None:
    if storage_options is None:
        return None
    if local_path(path) is not None:
        raise ConfigurationError(
            f"The {owner!r} checkpoint_io takes no storage_options, got {storage_options!r}, for the local path "
            f"{path!r}: storage_options are fsspec filesystem options for URLs such as 's3://bucket/ckpt.pt'. "
            f"Drop them, or use a checkpoint_io plugin that understands them."
        )
    if not isinstance(storage_options, dict):
        raise ConfigurationError(
            f"storage_options={storage_options!r} for {path!r}: expected a dict of fsspec filesystem options."
        )
    return storage_options


class TorchCheckpointIO:
    """One file per checkpoint through ``torch.save`` / ``torch.load``, on local disk or through ``fsspec``.

    :param storage_options: ``fsspec`` filesystem options used for every URL this plugin reads or writes.
    :param checksums: Seal an xxHash checksum into every file written and verify it on load, so that a flipped bit
        is a :class:`core.CheckpointError` naming the tensor rather than a silently changed value (about 6 GB/s of
        hashing; ``False`` skips both).
    """

    kind: Final = "checkpoint_io"
    name: Final = "torch"

    def __init__(self, storage_options: dict[str, Any] | None = None, checksums: bool = True) -> None:
        if not isinstance(checksums, bool):
            raise ConfigurationError(f"{type(self).__name__}(checksums={checksums!r}): expected True or False.")
        self.storage_options = storage_options
        self.checksums = checksums

    def _options(self, path: str, storage_options: Any | None) -> dict[str, Any] | None:
        given = _check_options(path, storage_options, self.name)
        if given is not None:
            return given
        return None if local_path(path) is not None else self.storage_options

    @hookimpl
    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        atomic_torch_save(checkpoint, path, self._options(path, storage_options), checksum=self.checksums)

    @hookimpl
    def checkpoint_io_load(self, path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
        return safe_torch_load(path, map_location, weights_only, self._options(path, None), verify=self.checksums)

    @hookimpl
    def checkpoint_io_remove(self, path: str) -> None:
        remove_path(path, self._options(path, None))
