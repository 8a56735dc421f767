"""``DirectoryCheckpointIO``: the base of a checkpoint_io that writes each checkpoint as a directory.

core-dcp's ``distributed`` and core-safetensors' ``safetensors`` write a directory on a local or shared filesystem,
with every rank of a sharded state taking part. What they share is here: the ``checksums`` option, the run's
:class:`core.ActiveSet` for barriers (``torch.distributed.barrier`` outside a run), the check that the path is a
local path, atomic installation of a finished directory (:func:`install_directory`) and removal.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from core._errors import ConfigurationError
from core._markers import hookimpl
from core.toolkit._storage import _fsync_directory, local_path

if TYPE_CHECKING:
    from core.registry import ActiveSet


def install_directory(partial: Path, target: Path) -> None:
    """Move the finished directory ``partial`` to ``target``, replacing what was there, and make it durable.

    A reader sees the old checkpoint or the new one, never a mix: the old one is renamed aside first and removed
    only once the new one is in place."""
    if target.exists() or target.is_symlink():
        retired = target.with_name(f".{target.name}.{uuid.uuid4().hex}.old")
        os.replace(target, retired)
        os.replace(partial, target)
        if retired.is_dir() and not retired.is_symlink():
            shutil.rmtree(retired)
        else:
            retired.unlink()
    else:
        os.replace(partial, target)
    _fsync_directory(target.parent)


class DirectoryCheckpointIO:
    """A checkpoint_io writing each checkpoint as a directory, every rank of a sharded state taking part.

    :param checksums: Seal each finished directory with a checksum file and verify it before loading (see
        :func:`core.toolkit.checkpoint.seal_directory`); ``False`` skips both.

    A subclass sets :attr:`name` (its alias), implements ``checkpoint_io_save`` and ``checkpoint_io_load`` with
    :meth:`local_target`, :meth:`partial_directory`, :meth:`barrier` and :func:`install_directory`, and may set
    :attr:`url_hint`, the advice given when a path is a URL, and :attr:`options_hint`, the advice given for
    ``storage_options`` (:meth:`save_target` refuses them).
    """

    kind: Final = "checkpoint_io"
    name: ClassVar[str] = "directory"
    writes_shards: Final = True
    """Strategies read this: every rank may call ``checkpoint_io_save`` with its shards of the state."""
    url_hint: ClassVar[str] = "Mount the storage, or use plugins=['torch'], which takes URLs."
    options_hint: ClassVar[str] = "configure it with its constructor's arguments"
    """What :meth:`save_target` advises instead of per-save ``storage_options``."""

    def __init__(self, *, checksums: bool = True) -> None:
        if not isinstance(checksums, bool):
            raise ConfigurationError(f"{type(self).__name__}(checksums={checksums!r}): expected True or False.")
        self.checksums = checksums
        self._active: ActiveSet | None = None

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    def local_target(self, path: str) -> Path:
        """``path`` as a local path; a URL is a :class:`core.ConfigurationError` with :attr:`url_hint`."""
        target = local_path(path)
        if target is None:
            raise ConfigurationError(
                f"The {self.name!r} checkpoint_io writes to a local or shared filesystem path, got the URL "
                f"{path!r}. {self.url_hint}"
            )
        return target

    def save_target(self, path: str, storage_options: Any | None) -> Path:
        """:meth:`local_target` for ``checkpoint_io_save``, refusing ``storage_options`` with :attr:`options_hint`.

        A directory checkpoint_io is configured when it is built, not per save: any ``storage_options`` is a
        :class:`core.ConfigurationError`.
        """
        if storage_options is not None:
            raise ConfigurationError(
                f"The {self.name!r} checkpoint_io takes no storage_options, got {storage_options!r}; "
                f"{self.options_hint}."
            )
        return self.local_target(path)

    def barrier(self, name: str) -> None:
        """Wait for every rank: through the run's strategy inside a run, ``torch.distributed`` outside one."""
        if self._active is not None:
            self._active.hook.strategy_barrier(name=name)
        else:
            import torch.distributed as dist

            dist.barrier()

    @staticmethod
    def partial_directory(target: Path, *, collective: bool) -> Path:
        """Where a checkpoint for ``target`` is written before :func:`install_directory` moves it into place.

        Alone, a name no other save uses; collectively, one name every rank agrees on without a message (rank 0
        clears what a crashed save left there before the ranks write)."""
        if collective:
            return target.with_name(f".{target.name}.partial")
        return target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")

    @hookimpl
    def checkpoint_io_remove(self, path: str) -> None:
        target = self.local_target(path)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
