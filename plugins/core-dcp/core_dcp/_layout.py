"""How a nested checkpoint becomes what ``torch.distributed.checkpoint`` stores, and back.

DCP flattens nested state itself, but it turns every dict key into a string and drops empty dicts, so an
optimizer's ``state`` (keyed by parameter index, empty before the first step) would not come back as
``load_state_dict`` expects. Here the checkpoint is split in two before DCP sees it:

- every tensor (plain or ``DTensor``) under its dotted path, ``"model.layer.weight"``,
  ``"optimizer.state.0.exp_avg"``: DCP shards, deduplicates and reshards these;
- one entry, :data:`SKELETON_KEY`, holding everything else exactly as it was (key types, empty containers,
  plain values), with a reference ``{TENSOR_TAG: "<dotted path>"}`` where each tensor was.

Loading reads the tensors and puts them back into the skeleton.

The ranks of a collective save usually pass the same skeleton (DCP keeps one copy). Where they differ (ranks that
write different parts of a checkpoint, as core-diloco's groups do), each distinct skeleton is kept under
``f"{SKELETON_KEY}.{rank}"``, named by the lowest rank that had it, and loading merges them in rank order: a key
missing from the lower ranks' skeletons is added from a higher one; where both have a value, the lower rank's
stands (the value a single kept skeleton would have given).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping, Sequence
from typing import Any, Final

import torch

from core import CheckpointError, ConfigurationError

SKELETON_KEY: Final = "core_dcp.skeleton"
"""The DCP entry holding the checkpoint without its tensors."""

TENSOR_TAG: Final = "__core_dcp_tensor__"
"""Marks, inside the skeleton, where a tensor stood: ``{TENSOR_TAG: dotted_path}``."""


def _rebuild_mapping(original: Mapping[Any, Any], items: list[tuple[Any, Any]]) -> Any:
    rebuilt = type(original)(items) if isinstance(original, dict) else dict(items)
    attributes = getattr(original, "__dict__", None)
    if attributes:  # a module state dict's ``_metadata`` (its version numbers)
        rebuilt.__dict__.update(attributes)
    return rebuilt


def split(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The flat dict DCP saves: each tensor under its dotted path, plus the skeleton."""
    tensors: dict[str, torch.Tensor] = {}

    def visit(value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, torch.Tensor):
            key = ".".join(path)
            if key in tensors or key.startswith(SKELETON_KEY):
                raise ConfigurationError(
                    f"Two tensors of the checkpoint have the dotted path {key!r} (a key holding a dot collides with "
                    f"a nested key); rename one of them to save with the 'distributed' checkpoint_io."
                )
            tensors[key] = value
            return {TENSOR_TAG: key}
        if isinstance(value, Mapping):
            return _rebuild_mapping(value, [(name, visit(item, (*path, str(name)))) for name, item in value.items()])
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(visit(item, (*path, str(index))) for index, item in enumerate(value)))
        if isinstance(value, (list, tuple)):
            return type(value)(visit(item, (*path, str(index))) for index, item in enumerate(value))
        return value

    skeleton = visit(checkpoint, ())
    # In a tuple, DCP stores the skeleton as one opaque value instead of flattening it (lossily) again.
    return {**tensors, SKELETON_KEY: (skeleton,)}


def skeleton_digest(flat: Mapping[str, Any]) -> str:
    """A digest of the skeleton in :func:`split`'s output, to compare the ranks' skeletons before a save."""
    return hashlib.sha256(pickle.dumps(flat[SKELETON_KEY], protocol=4)).hexdigest()


def name_skeleton(flat: dict[str, Any], digests: Sequence[str], rank: int) -> dict[str, Any]:
    """``flat`` with its skeleton renamed ``f"{SKELETON_KEY}.{r}"`` when the ranks' skeletons (``digests``, by rank)
    differ, ``r`` the lowest rank with the same one; unchanged when they are all the same."""
    if len(set(digests)) == 1:
        return flat
    renamed = {key: value for key, value in flat.items() if key != SKELETON_KEY}
    renamed[f"{SKELETON_KEY}.{list(digests).index(digests[rank])}"] = flat[SKELETON_KEY]
    return renamed


def _skeletons(flat: Mapping[str, Any], where: str) -> list[Any]:
    if SKELETON_KEY in flat:
        named = [(0, SKELETON_KEY)]
    else:
        named = []
        for key in flat:
            rank = key[len(SKELETON_KEY) + 1:] if key.startswith(f"{SKELETON_KEY}.") else ""
            if rank.isdigit():
                named.append((int(rank), key))
    found = []
    for _, key in sorted(named):
        wrapped = flat[key]
        if not (isinstance(wrapped, tuple) and len(wrapped) == 1):
            raise CheckpointError(f"The distributed checkpoint {where!r} has a malformed {key!r} entry.")
        found.append(wrapped[0])
    return found


def _merge(lower: Any, higher: Any) -> Any:
    """``lower`` with what only ``higher`` has added, recursively through mappings."""
    if not (isinstance(lower, Mapping) and isinstance(higher, Mapping)) or (TENSOR_TAG in lower):
        return lower
    items = [(key, _merge(value, higher[key]) if key in higher else value) for key, value in lower.items()]
    items += [(key, value) for key, value in higher.items() if key not in lower]
    return _rebuild_mapping(lower, items)


def join(flat: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The nested checkpoint from what :func:`split` produced (with :func:`name_skeleton`) and DCP read back."""
    skeletons = _skeletons(flat, where)
    if not skeletons:
        return dict(flat)  # written by plain DCP: its own nesting is all there is

    def visit(value: Any) -> Any:
        if isinstance(value, Mapping):
            if len(value) == 1 and TENSOR_TAG in value:
                key = value[TENSOR_TAG]
                if key not in flat:
                    raise CheckpointError(f"The distributed checkpoint {where!r} lacks the tensor {key!r}.")
                return flat[key]
            return _rebuild_mapping(value, [(name, visit(item)) for name, item in value.items()])
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(visit(item) for item in value))
        if isinstance(value, (list, tuple)):
            return type(value)(visit(item) for item in value)
        return value

    skeleton = skeletons[0]
    for higher in skeletons[1:]:
        skeleton = _merge(skeleton, higher)
    checkpoint = visit(skeleton)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"The distributed checkpoint {where!r} holds a {type(checkpoint).__name__}, not a dict.")
    return checkpoint


def holds_dtensors(value: Any) -> bool:
    """Whether any tensor in ``value`` is a ``DTensor`` (a shard of a tensor spread over the ranks)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return True
    if isinstance(value, Mapping):
        return any(holds_dtensors(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_dtensors(item) for item in value)
    return False


def tensor_ranges(metadata: Any) -> dict[str, list[tuple[str, int, int]]]:
    """File name -> the (tensor, offset, length) byte ranges DCP wrote there, read from the save's metadata.

    A sharded tensor has one range per shard it wrote (named ``model.weight[offset 0, 4]``); what is not a byte
    range of a file (a metadata entry of another storage layout) is left out, so checking stays per file there.
    """
    ranges: dict[str, list[tuple[str, int, int]]] = {}
    for index, info in (getattr(metadata, "storage_data", None) or {}).items():
        relative_path, offset, length = (getattr(info, name, None) for name in ("relative_path", "offset", "length"))
        if not (isinstance(relative_path, str) and isinstance(offset, int) and isinstance(length, int)):
            continue
        name = str(getattr(index, "fqn", index))
        if name.startswith(SKELETON_KEY):
            name = f"{name} (the checkpoint's values other than tensors)"
        chunk = getattr(index, "offset", None)
        if chunk is not None and any(chunk):
            name = f"{name}[offset {', '.join(map(str, chunk))}]"
        ranges.setdefault(relative_path, []).append((name, offset, length))
    return ranges
