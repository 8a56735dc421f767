"""Hugging Face's file layout for weights, without torch: names, shard plans, the index, a file's header.

A module's weights are one file, ``model.safetensors``, or shards ``model-00001-of-00003.safetensors`` ... with
``model.safetensors.index.json``: ``{"metadata": {"total_size": <bytes of all tensors>}, "weight_map": {<tensor
name>: <file name>}}``, exactly what ``transformers`` and ``huggingface_hub`` write and read. Shards are filled in
the order of the state dict, a new one started when the next tensor would make the current one larger than the
maximum; a tensor larger than the maximum gets a shard of its own (``huggingface_hub``'s rule).

A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape and byte
range ``data_offsets`` relative to the end of the header; ``__metadata__``, strings only), then the bytes.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from core import CheckpointError, ConfigurationError

WEIGHTS_NAME: Final = "model.safetensors"
"""The file of an unsharded module's weights."""

INDEX_NAME: Final = "model.safetensors.index.json"
"""The index of a sharded module's weights: which file holds each tensor."""

LAYOUT_FILE: Final = "core_safetensors.json"
"""Beside the weights: ``{"weights_key": ...}``, the checkpoint entry they came from (``"model"``). Kept out of the
files' ``__metadata__``, whose keys the library writes in no fixed order: the weight files of a state are the same
bytes whatever layout or rank wrote them."""

_SHARD_NAME: Final = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
_UNITS: Final = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
                 "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_MAX_HEADER: Final = 100 << 20  # the safetensors library's own limit on the JSON header


def parse_size(size: int | str, owner: str = "max_shard_size") -> int:
    """Bytes from ``5_000_000``, ``"5MB"`` (10**6) or ``"5MiB"`` (2**20), as ``huggingface_hub`` reads them.

    :raises core.ConfigurationError: not a positive whole number of bytes with a known unit.
    """
    if isinstance(size, int) and not isinstance(size, bool):
        if size >= 1:
            return size
    elif isinstance(size, str):
        match = _SIZE.fullmatch(size)
        if match and match.group(2).lower() in _UNITS:
            count = float(match.group(1)) * _UNITS[match.group(2).lower()]
            if count >= 1 and count == int(count):
                return int(count)
    raise ConfigurationError(
        f"{owner}={size!r} is not a size: expected a whole number of bytes >= 1, or a string such as '5GB' "
        f"(10**9 bytes) or '500MiB' (2**20 bytes each); units: {', '.join(unit for unit in _UNITS if unit)}."
    )


def plan_shards(sizes: Sequence[tuple[str, int]], max_shard_size: int | None) -> list[list[str]]:
    """Tensor names grouped into files, in order: ``sizes`` is ``(name, bytes)`` in the state dict's order.

    ``None`` (no maximum) gives one file. Otherwise a shard is closed when the next tensor would take it past
    ``max_shard_size`` bytes; a tensor larger than the maximum alone makes a shard.
    """
    if max_shard_size is None:
        return [[name for name, _ in sizes]] if sizes else []
    shards: list[list[str]] = []
    current: list[str] = []
    filled = 0
    for name, size in sizes:
        if current and filled + size > max_shard_size:
            shards.append(current)
            current, filled = [], 0
        current.append(name)
        filled += size
    if current:
        shards.append(current)
    return shards


def shard_file_names(count: int) -> list[str]:
    """The files of ``count`` shards: ``model.safetensors`` alone, or ``model-00001-of-0000N.safetensors``."""
    if count <= 1:
        return [WEIGHTS_NAME]
    return [f"model-{index:05d}-of-{count:05d}.safetensors" for index in range(1, count + 1)]


def index_document(weight_map: Mapping[str, str], total_size: int) -> dict[str, Any]:
    """The content of ``model.safetensors.index.json``."""
    return {"metadata": {"total_size": total_size}, "weight_map": dict(weight_map)}


def write_layout(directory: Path, weights_key: str) -> None:
    """Record in ``directory`` which checkpoint entry its weights came from."""
    (directory / LAYOUT_FILE).write_text(json.dumps({"weights_key": weights_key}) + "\n", encoding="utf-8")


def read_layout(directory: Path, where: str) -> str | None:
    """The checkpoint entry the weights in ``directory`` came from; ``None`` for weights written elsewhere."""
    path = directory / LAYOUT_FILE
    if not path.is_file():
        return None
    try:
        key = json.loads(path.read_text(encoding="utf-8"))["weights_key"]
    except (ValueError, KeyError, TypeError):
        key = None
    if not isinstance(key, str):
        raise CheckpointError(
            f"The checkpoint {where!r} has a damaged {LAYOUT_FILE}: expected {{\"weights_key\": \"<entry>\"}}. "
            f"Restore it from a copy, or delete it to load the weights under 'model'."
        )
    return key


def weight_map(directory: Path, where: str) -> dict[str, str] | None:
    """Tensor name -> file name for the weights in ``directory``, in the index's order (sorted by name for one
    file, as ``safe_open(...).keys()`` lists them); ``None`` when it holds none.

    :raises core.CheckpointError: the index is unreadable or names a file that is not there.
    """
    index = directory / INDEX_NAME
    if index.is_file():
        try:
            document = json.loads(index.read_text(encoding="utf-8"))
            mapping = document["weight_map"]
            if not (isinstance(mapping, dict) and all(isinstance(v, str) for v in mapping.values())):
                raise TypeError("weight_map is not a mapping of tensor names to file names")
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(
                f"The index {str(index)!r} of the checkpoint {where!r} is damaged ({type(error).__name__}: {error}); "
                f"expected Hugging Face's format {{'metadata': {{'total_size': ...}}, 'weight_map': {{name: file}}}}."
            ) from None
        missing = sorted({name for name in mapping.values() if not (directory / name).is_file()})
        if missing:
            raise CheckpointError(
                f"The checkpoint {where!r} is incomplete: its {INDEX_NAME} names the file(s) {missing}, which are "
                f"not in the directory. Copy them there, or use a complete checkpoint."
            )
        return dict(mapping)
    single = directory / WEIGHTS_NAME
    if single.is_file():
        return {name: WEIGHTS_NAME for name in sorted(read_header(single, where))}
    return None


def read_header(path: Path, where: str) -> dict[str, dict[str, Any]]:
    """Each tensor's ``{"dtype", "shape", "data_offsets"}`` from a safetensors file's header, the
    ``data_offsets`` made absolute (from the start of the file); ``__metadata__`` left out.

    :raises core.CheckpointError: the file is too short or its header is not a safetensors header.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
        problem = ""
        if length < 0 or length > _MAX_HEADER or 8 + length > size:
            problem = f"its header length says {length} bytes in a file of {size}"
        else:
            try:
                header = json.loads(handle.read(length))
            except ValueError as error:
                header, problem = None, f"its header is not JSON ({error})"
            if header is not None and not isinstance(header, dict):
                problem = "its header is not a JSON object"
    if problem:
        raise CheckpointError(
            f"{str(path)!r} (in the checkpoint {where!r}) is not a readable safetensors file: {problem}. It is "
            f"truncated or damaged; restore it from a copy or use an earlier checkpoint."
        )
    start = 8 + length
    tensors: dict[str, dict[str, Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and start + offsets[1] <= size):
            raise CheckpointError(
                f"{str(path)!r} (in the checkpoint {where!r}) is truncated or damaged: the bytes of the tensor "
                f"{name!r} ({offsets}) lie beyond its end ({size - start} bytes of data). Restore it from a copy."
            )
        tensors[name] = {**entry, "data_offsets": [start + offsets[0], start + offsets[1]]}
    return tensors


def tensor_ranges(directory: Path, where: str) -> dict[str, list[tuple[str, int, int]]]:
    """File name -> ``(tensor, offset, length)`` for every weight file in ``directory`` (for checksums)."""
    ranges: dict[str, list[tuple[str, int, int]]] = {}
    for path in sorted(directory.iterdir()):
        if path.name == WEIGHTS_NAME or _SHARD_NAME.fullmatch(path.name):
            ranges[path.name] = [(name, entry["data_offsets"][0], entry["data_offsets"][1] - entry["data_offsets"][0])
                                 for name, entry in read_header(path, where).items()]
    return ranges
