"""The ``safetensors`` checkpoint_io: a checkpoint directory whose weights Hugging Face tools read as they are.

``path`` is a directory:

- ``model.safetensors``, or shards ``model-0000i-of-0000N.safetensors`` with ``model.safetensors.index.json``: the
  module's weights (the checkpoint entry ``weights_key``, ``"model"`` or ``"state_dict"`` by default);
- ``state.pt``: everything else (optimizer, step counters, ...) in the project's own format (the ``torch``
  checkpoint_io's file), or ``state/``, a ``distributed`` (core-dcp) directory, when that state is sharded;
- the checksums of the files (:func:`core.toolkit.checkpoint.seal_directory`), verified before loading.

Everything is written into a hidden directory beside ``path`` and renamed into place once complete, so a crash
mid-save leaves the previous checkpoint as it was. Sharded weights are gathered tensor by tensor to the rank that
writes their file (safetensors has no partial tensors): see :mod:`core_safetensors._weights`.

Loading returns whole tensors on every rank, as strategies expect from a checkpoint_io (``fsdp`` and
``model_parallel`` keep each rank's part when the module loads them); to read only a sharded module's own slices,
call :func:`core_safetensors.load_weights` on the module.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Final

import torch
import torch.distributed as dist
from core_dcp import DistributedCheckpointIO, holds_dtensors

from core import CheckpointError, ConfigurationError, hookimpl
from core.toolkit.checkpoint import (
    DirectoryCheckpointIO,
    atomic_torch_save,
    install_directory,
    reporting_full_disk,
    safe_torch_load,
    seal_directory,
    verify_directory,
)

from ._format import parse_size, read_layout, tensor_ranges, weight_map, write_layout
from ._weights import WRITERS, check_weights, read_all, read_weights, write_weights

STATE_FILE: Final = "state.pt"
"""The checkpoint's values other than the weights, in the ``torch`` checkpoint_io's format."""

STATE_DIRECTORY: Final = "state"
"""The same, as a ``distributed`` (core-dcp) directory, when the optimizer state is sharded."""

WEIGHTS_KEYS: Final = ("model", "state_dict")
"""Where the weights are looked for when no ``weights_key`` is given: ``Lite.save``'s and the Trainer's names."""


class SafetensorsCheckpointIO(DirectoryCheckpointIO):
    """Checkpoints as directories whose weights are Hugging Face's ``model.safetensors`` (or its shards).

    :param weights_key: The checkpoint entry holding the module's state dict. ``None``: ``"model"``, else
        ``"state_dict"``, whichever the checkpoint has (a checkpoint with neither has no weight files: all of it goes to
        ``state.pt``, or ``state/`` when sharded).
    :param max_shard_size: Split the weights into files of at most this size (bytes, or ``"5GB"`` / ``"500MiB"``),
        with ``model.safetensors.index.json``; ``None``: one ``model.safetensors``.
    :param writers: For sharded weights (``fsdp``, ``model_parallel``): ``"all"`` deals the files out to the ranks,
        each gathering and writing its own; ``"rank0"`` gathers everything on rank 0, which writes alone.
    :param checksums: Seal the files' xxHash digests into the directory and verify them on load, so a flipped bit is
        a :class:`core.CheckpointError` naming the file and tensor (a directory written elsewhere has none and loads
        unverified). ``False`` skips both.
    """

    name: ClassVar[str] = "safetensors"
    options_hint: ClassVar[str] = "configure it with SafetensorsCheckpointIO(max_shard_size=..., writers=...)"

    def __init__(self, weights_key: str | None = None, max_shard_size: int | str | None = None, writers: str = "all",
                 checksums: bool = True) -> None:
        if weights_key is not None and not isinstance(weights_key, str):
            raise ConfigurationError(f"SafetensorsCheckpointIO(weights_key={weights_key!r}): expected a string.")
        if writers not in WRITERS:
            raise ConfigurationError(
                f"SafetensorsCheckpointIO(writers={writers!r}): expected one of {list(WRITERS)}.")
        super().__init__(checksums=checksums)
        self.weights_key = weights_key
        self.max_shard_size = None if max_shard_size is None else parse_size(max_shard_size)
        self.writers = writers

    def _weights_key(self, checkpoint: dict[str, Any]) -> str | None:
        if self.weights_key is not None:
            if self.weights_key not in checkpoint:
                raise ConfigurationError(
                    f"SafetensorsCheckpointIO(weights_key={self.weights_key!r}), but the checkpoint has no such "
                    f"entry; its entries: {sorted(map(str, checkpoint))}."
                )
            return self.weights_key
        return next((key for key in WEIGHTS_KEYS if key in checkpoint), None)

    @hookimpl
    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        target = self.save_target(path, storage_options)
        key = self._weights_key(checkpoint)
        weights = check_weights(checkpoint[key], key) if key is not None else {}
        rest = {name: value for name, value in checkpoint.items() if name != key}
        collective = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and holds_dtensors(
            checkpoint)
        if collective:
            self._save_collective(target, key, weights, rest)
        else:
            self._save_alone(target, key, weights, rest)

    def _save_alone(self, target: Path, key: str | None, weights: dict[str, torch.Tensor],
                    rest: dict[str, Any]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = self.partial_directory(target, collective=False)
        with reporting_full_disk(target, [weights, rest]):  # around the cleanup: the space a new save finds
            try:
                partial.mkdir()
                if key is not None:
                    write_weights(partial, weights, self.max_shard_size)
                    write_layout(partial, key)
                if rest or key is None:
                    atomic_torch_save(rest, str(partial / STATE_FILE), checksum=self.checksums)
                self._finish(partial, target)
            finally:
                shutil.rmtree(partial, ignore_errors=True)

    def _save_collective(self, target: Path, key: str | None, weights: dict[str, torch.Tensor],
                         rest: dict[str, Any]) -> None:
        partial = self.partial_directory(target, collective=True)
        rank = dist.get_rank()
        if rank == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
        self.barrier("safetensors checkpoint: prepare")
        with reporting_full_disk(target, [weights, rest]):
            if key is not None:
                write_weights(partial, weights, self.max_shard_size, self.writers)
                if rank == 0:
                    write_layout(partial, key)
            if holds_dtensors(rest):  # sharded optimizer state: every rank writes its part, in core-dcp's format
                DistributedCheckpointIO(checksums=self.checksums).checkpoint_io_save(
                    checkpoint=rest, path=str(partial / STATE_DIRECTORY), storage_options=None)
            elif (rest or key is None) and rank == 0:
                atomic_torch_save(rest, str(partial / STATE_FILE), checksum=self.checksums)
        self.barrier("safetensors checkpoint: written")
        if rank == 0:
            with reporting_full_disk(target):
                try:
                    self._finish(partial, target)
                finally:
                    shutil.rmtree(partial, ignore_errors=True)
        self.barrier("safetensors checkpoint: installed")

    def _finish(self, partial: Path, target: Path) -> None:
        if self.checksums:
            seal_directory(partial, tensor_ranges(partial, str(target)))
        install_directory(partial, target)

    @hookimpl
    def checkpoint_io_load(self, path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
        target = self.local_target(path)
        if not target.exists():
            raise CheckpointError(f"No checkpoint at {path!r}: the directory does not exist.")
        device = self._device(map_location)
        if target.is_file():
            if target.suffix == ".safetensors":  # a lone weights file, e.g. from safetensors.torch.save_file
                return {self.weights_key or WEIGHTS_KEYS[0]: read_weights(target, device)}
            loaded: dict[str, Any] = safe_torch_load(target, map_location, weights_only, verify=self.checksums)
            return loaded
        if self.checksums:
            verify_directory(target, path)
        mapping = weight_map(target, path)
        checkpoint: dict[str, Any] = {}
        if mapping is not None:
            key = self.weights_key or read_layout(target, path) or WEIGHTS_KEYS[0]
            checkpoint[key] = read_all(target, mapping, path, device)
        if (target / STATE_DIRECTORY).is_dir():
            checkpoint.update(DistributedCheckpointIO(checksums=self.checksums).checkpoint_io_load(
                path=str(target / STATE_DIRECTORY), map_location=map_location, weights_only=weights_only))
        elif (target / STATE_FILE).is_file():
            checkpoint.update(safe_torch_load(target / STATE_FILE, map_location, weights_only, verify=self.checksums))
        elif mapping is None:
            raise CheckpointError(
                f"{path!r} is not a 'safetensors' checkpoint: it has no model.safetensors, no "
                f"model.safetensors.index.json and no {STATE_FILE}."
            )
        return checkpoint

    @staticmethod
    def _device(map_location: Any | None) -> str:
        if map_location is None:
            return "cpu"
        if not isinstance(map_location, (str, torch.device)):
            raise ConfigurationError(
                f"The 'safetensors' checkpoint_io takes a device as map_location, got {map_location!r}."
            )
        return str(torch.device(map_location))
