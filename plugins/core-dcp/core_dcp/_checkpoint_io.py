"""The ``distributed`` checkpoint_io: a directory written by ``torch.distributed.checkpoint``.

Who writes is the strategy's decision (``strategy_save_checkpoint``); this plugin follows from the state
it is given:

- **collective**, when a process group of several ranks exists and the state holds ``DTensor`` shards
  (``fsdp`` with ``state_dict_type="sharded"``): every rank calls the save and writes its own shards;
  tensors present on every rank are written once.
- **alone**, otherwise (one process, or rank 0 of ``ddp`` holding the whole state): the calling process
  writes everything, without any collective.

Either way the directory is written under a hidden temporary name and renamed into place once DCP has
written its ``.metadata`` (last, after every rank's data), so the old checkpoint at the path survives a
crash mid-save. Loading reads the whole state onto the CPU of the calling process, whatever the world
size that wrote it: that is the resharding a plain ``load_state_dict`` needs (``core-fsdp`` shards it
again in place). A single file written by the ``torch`` checkpoint_io loads too.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Final

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from core import CheckpointError, ConfigurationError, CoreError, hookimpl
from core.toolkit.checkpoint import (
    DirectoryCheckpointIO,
    install_directory,
    reporting_full_disk,
    safe_torch_load,
    seal_directory,
    verify_directory,
)
from core.toolkit.tensors import apply_to_tensors

from ._layout import holds_dtensors, join, name_skeleton, skeleton_digest, split, tensor_ranges
from ._safe import METADATA_FILE, FullReadPlanner, SafeReader, read_metadata

# DCP warns when it runs without a process group; here that is the intent (see is_collective).
_SINGLE_PROCESS_WARNING: Final = "torch.distributed is disabled, unavailable or uninitialized"


@contextmanager
def _translated(action: str, where: str) -> Iterator[None]:
    """DCP's ``CheckpointException`` (a ``BaseException`` gathering every rank's failure) as a project error."""
    try:
        yield
    except CheckpointException as error:
        failures = error.failures
        first = failures[min(failures)][0]
        if isinstance(first, CoreError):
            raise first from None
        raise CheckpointError(
            f"{action} the distributed checkpoint {where!r} failed on rank(s) {sorted(failures)}: "
            f"{type(first).__name__}: {first}"
        ) from first


class DistributedCheckpointIO(DirectoryCheckpointIO):
    """Checkpoints as DCP directories: sharded state written by every rank, reshardable on load.

    :param thread_count: Writer threads per rank.
    :param sync_files: ``fsync`` every file before the checkpoint counts as written.
    :param checksums: Write a checksum file (:func:`core.toolkit.checkpoint.seal_directory`: each file's xxHash
        digest, and each tensor's) into every checkpoint, and verify it before loading, so that a flipped bit is a
        :class:`core.CheckpointError` naming the file and the tensor. Rank 0 hashes the finished directory once (it
        reads back the other ranks' files: on a shared filesystem of a multi-node job, that is a read of the whole
        checkpoint); ``False`` skips writing and checking.
    """

    name: ClassVar[str] = "distributed"
    options_hint: ClassVar[str] = "configure it with DistributedCheckpointIO(thread_count=..., sync_files=...)"
    url_hint: ClassVar[str] = (
        "Mount the storage, or save a full (gathered) checkpoint with plugins=['torch'], which takes URLs."
    )

    def __init__(self, thread_count: int = 1, sync_files: bool = True, checksums: bool = True) -> None:
        if thread_count < 1:
            raise ConfigurationError(f"DistributedCheckpointIO(thread_count={thread_count!r}) must be >= 1.")
        super().__init__(checksums=checksums)
        self.thread_count = thread_count
        self.sync_files = sync_files

    def _writer(self, directory: Path) -> FileSystemWriter:
        return FileSystemWriter(directory, single_file_per_rank=True, sync_files=self.sync_files,
                                thread_count=self.thread_count)

    @staticmethod
    def is_collective(checkpoint: dict[str, Any]) -> bool:
        """Whether every rank takes part in saving ``checkpoint`` (see the module docstring)."""
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and holds_dtensors(
            checkpoint
        )

    @hookimpl
    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        target = self.save_target(path, storage_options)
        flat = split(checkpoint)
        if self.is_collective(checkpoint):
            self._save_collective(flat, target)
        else:
            self._save_alone(flat, target)

    def _save_alone(self, flat: dict[str, Any], target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = self.partial_directory(target, collective=False)
        with reporting_full_disk(target, flat):  # around the cleanup: it reports the space a new save finds
            try:
                with warnings.catch_warnings(), _translated("Saving", str(target)):
                    warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
                    metadata = dcp.save(flat, storage_writer=self._writer(partial), no_dist=True)
                self._seal(partial, metadata)
                install_directory(partial, target)
            finally:
                shutil.rmtree(partial, ignore_errors=True)

    def _save_collective(self, flat: dict[str, Any], target: Path) -> None:
        digests: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(digests, skeleton_digest(flat))
        flat = name_skeleton(flat, digests, dist.get_rank())  # ranks whose values other than tensors differ
        partial = self.partial_directory(target, collective=True)
        if dist.get_rank() == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)
        self.barrier("distributed checkpoint: prepare")
        # Every rank writes its shards; the coordinator writes .metadata after all of them, then all return.
        with reporting_full_disk(target, flat), _translated("Saving", str(target)):
            metadata = dcp.save(flat, storage_writer=self._writer(partial))
        if dist.get_rank() == 0:  # every rank's files are complete: the coordinator wrote .metadata after them
            with reporting_full_disk(target):
                self._seal(partial, metadata)
                install_directory(partial, target)
        self.barrier("distributed checkpoint: installed")

    def _seal(self, directory: Path, metadata: Any) -> None:
        if self.checksums:
            seal_directory(directory, tensor_ranges(metadata))

    @hookimpl
    def checkpoint_io_load(self, path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
        target = self.local_target(path)
        if not target.exists():
            raise CheckpointError(f"No checkpoint at {path!r}: the directory does not exist.")
        if target.is_file():  # a full checkpoint from the 'torch' checkpoint_io: loaded into a sharded run too
            loaded: dict[str, Any] = safe_torch_load(target, map_location, weights_only, verify=self.checksums)
            return loaded
        if not (target / METADATA_FILE).is_file():
            raise CheckpointError(
                f"The distributed checkpoint {path!r} is incomplete: it has no {METADATA_FILE}, which is written "
                f"last, so the save that made it was interrupted (or the directory is not a DCP checkpoint)."
            )
        if self.checksums:
            verify_directory(target, path)
        metadata = read_metadata(str(target), weights_only)
        flat: dict[str, Any] = {}
        # The state is rebuilt from the metadata into ``flat`` itself; dcp.load would copy back only the keys
        # ``flat`` already had (none). torch's own dcp_to_torch_save reads this way.
        with warnings.catch_warnings(), _translated("Loading", path):
            warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
            _load_state_dict(flat, storage_reader=SafeReader(str(target), weights_only, metadata),
                             planner=FullReadPlanner(path, weights_only), no_dist=True)
        checkpoint = join(flat, path)
        if map_location is None:
            return checkpoint
        if not isinstance(map_location, (str, torch.device)):
            raise ConfigurationError(
                f"The 'distributed' checkpoint_io takes a device as map_location, got {map_location!r}."
            )
        device = torch.device(map_location)
        if device.type == "cpu":
            return checkpoint
        result: dict[str, Any] = apply_to_tensors(checkpoint, lambda tensor: tensor.to(device))
        return result
