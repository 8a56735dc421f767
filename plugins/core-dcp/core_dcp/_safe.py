"""Reading a DCP checkpoint with ``weights_only=True``: nothing in the files may run code.

``torch.distributed.checkpoint`` reads its ``.metadata`` file with ``pickle.load`` and every non-tensor
value with ``torch.load(weights_only=False)``. Here the metadata is unpickled with an allow-list of the
classes DCP itself writes there (its record types, ``torch.Size``, dtypes, layouts, paths), and values go
through ``torch.load`` with the caller's ``weights_only``.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import IO, Any, Final

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from core import CheckpointError
from core.toolkit.checkpoint import torch_load_from

METADATA_FILE: Final = ".metadata"
_DCP_MODULES: Final = ("torch.distributed.checkpoint.",)
_ALLOWED: Final = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class _Refused(pickle.UnpicklingError):
    """The metadata names a class DCP never writes there: loading it could run code (not damage)."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_DCP_MODULES) or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        value = getattr(torch, name, None) if module == "torch" else None
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return value
        raise _Refused(f"{module}.{name} is not a type DCP writes into its metadata")


def read_metadata(path: str, weights_only: bool) -> Metadata:
    """The ``.metadata`` of the DCP checkpoint at ``path``, unpickled safely when ``weights_only``."""
    metadata_path = Path(path) / METADATA_FILE
    with open(metadata_path, "rb") as handle:
        try:
            metadata = (_MetadataUnpickler(handle) if weights_only else pickle.Unpickler(handle)).load()
        except _Refused as error:
            raise CheckpointError(
                f"Refused to load {path!r}: its {METADATA_FILE} holds objects that are not DCP metadata ({error}), "
                f"and loading them would run code from the file. Nothing from it was executed. If you trust the "
                f"checkpoint, load it with weights_only=False."
            ) from None
        except Exception as error:  # truncated or damaged bytes: pickle raises whatever its opcode parser hits
            raise CheckpointError(
                f"The distributed checkpoint {path!r} has a corrupt or truncated {METADATA_FILE} "
                f"({type(error).__name__}: {error}); it cannot be read with or without weights_only. Restore the "
                f"directory from a copy or use an earlier checkpoint."
            ) from None
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{str(metadata_path)!r} holds a {type(metadata).__name__}, not DCP metadata.")
    return metadata


class SafeReader(FileSystemReader):
    """A ``FileSystemReader`` whose metadata is read by :func:`read_metadata`.

    :param metadata: The metadata, read already: reading it here first turns a damaged ``.metadata`` into one
        :class:`core.CheckpointError` before DCP's loader, which logs the traceback of a failed read, is entered.
    """

    def __init__(self, path: str, weights_only: bool, metadata: Metadata | None = None) -> None:
        super().__init__(path)
        self.where = path
        self.weights_only = weights_only
        self.metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = self.metadata if self.metadata is not None else read_metadata(self.where, self.weights_only)
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata


class _WeightsOnlyBytes:
    """``load_bytes`` with the caller's ``weights_only``, for DCP load planners."""

    where: str
    weights_only: bool
    flatten_state_dict: bool
    original_state_dict: dict[str, Any]
    mappings: dict[str, Any]
    state_dict: dict[str, Any]

    def load_bytes(self, read_item: ReadItem, value: IO[bytes]) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        loaded = torch_load_from(value if isinstance(value, io.BytesIO) else io.BytesIO(value.read()),
                                 self.where, None, self.weights_only)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


class FullReadPlanner(_WeightsOnlyBytes, _EmptyStateDictLoadPlanner):
    """Rebuilds the whole saved state from the metadata: every tensor whole, on the CPU."""

    def __init__(self, where: str, weights_only: bool) -> None:
        super().__init__()
        self.where = where
        self.weights_only = weights_only


class InPlacePlanner(_WeightsOnlyBytes, DefaultLoadPlanner):
    """Loads into the given tensors (``DTensor`` shards read only their part), as ``dcp.load`` does."""

    def __init__(self, where: str, weights_only: bool, allow_partial_load: bool = False) -> None:
        super().__init__(allow_partial_load=allow_partial_load)
        self.where = where
        self.weights_only = weights_only
