"""Writing a module's weights as safetensors files, and reading them back whole or slice by slice.

A safetensors file holds whole tensors, and the index maps each tensor to one file, so a tensor sharded over
ranks (a ``DTensor`` of ``fsdp`` or ``model_parallel``) cannot be written in pieces by the ranks that hold them.
Sharded weights are therefore **gathered per tensor to the rank that writes its file**: with ``writers="all"``
the files of a sharded checkpoint are dealt out to the ranks (file ``i`` to rank ``i % world_size``) and every
rank writes its own files at the same time, holding the gathered tensors of those files only; with
``writers="rank0"`` rank 0 gathers and writes everything. Reading is the other way round: a sharded module
reads only its own slice of each tensor (``safe_open(...).get_slice``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import torch
import torch.distributed as dist
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from core import CheckpointError, ConfigurationError
from core.toolkit.checkpoint import raise_if_mismatched

from ._format import INDEX_NAME, index_document, plan_shards, read_header, shard_file_names, weight_map

WRITERS: Final = ("all", "rank0")
_SHOWN: Final = 8


def _global_nbytes(tensor: torch.Tensor) -> int:
    return math.prod(tensor.shape) * tensor.element_size()  # a DTensor's shape is the global one


def _writable(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """On the CPU, contiguous, and no two sharing storage: ``save_file`` refuses tied weights as they are, and a
    copy of each keeps a module's tied names loadable with ``strict=True`` (Hugging Face drops one name instead)."""
    seen: set[int] = set()
    writable: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage()
        if storage.data_ptr() and (storage.data_ptr() in seen or storage.nbytes() != tensor.nbytes):
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        writable[name] = tensor
    return writable


def _write_file(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    try:
        save_file(_writable(tensors), str(path), metadata={"format": "pt"})
    except (SafetensorError, ValueError, TypeError) as error:
        raise CheckpointError(
            f"Writing the weights file {str(path)!r} failed: {type(error).__name__}: {error}"
        ) from None
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def check_weights(weights: Mapping[str, Any], key: str) -> dict[str, torch.Tensor]:
    """The tensors of a module's state dict, or a :class:`core.ConfigurationError` naming what is not one."""
    if not isinstance(weights, Mapping):
        raise ConfigurationError(
            f"The checkpoint entry {key!r} holds a {type(weights).__name__}; the 'safetensors' checkpoint_io writes "
            f"it as a module's weights and needs a state dict (names -> tensors) there."
        )
    wrong = {str(name): type(value).__name__ for name, value in weights.items()
             if not (isinstance(name, str) and isinstance(value, torch.Tensor))}
    if wrong:
        shown = dict(list(wrong.items())[:_SHOWN])
        raise ConfigurationError(
            f"The checkpoint entry {key!r} is written as a module's weights, which safetensors stores as named "
            f"tensors only, but it holds other values: {shown}. Save only the module's state dict under {key!r} "
            f"(other values beside it), or pick another entry with SafetensorsCheckpointIO(weights_key=...)."
        )
    return dict(weights)


def write_weights(directory: Path, weights: Mapping[str, torch.Tensor], max_shard_size: int | None,
                  writers: str = "all") -> None:
    """Write the weights into ``directory`` (which exists) as Hugging Face's files.

    Called by one process with whole tensors, or by every rank of a process group at once when the weights hold
    ``DTensor`` shards (collective: see the module docstring). The caller makes the directory's appearance atomic.
    """
    collective = any(isinstance(value, DTensor) for value in weights.values()) and dist.is_initialized() and (
        dist.get_world_size() > 1)
    groups = plan_shards([(name, _global_nbytes(value)) for name, value in weights.items()], max_shard_size)
    files = shard_file_names(len(groups))
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if collective else (0, 1)
    mine: dict[str, dict[str, torch.Tensor]] = {}
    for index, (file_name, names) in enumerate(zip(files, groups, strict=True)):
        writer = index % world_size if writers == "all" else 0
        for name in names:  # the same order on every rank: each full_tensor() is a collective of all of them
            value = weights[name]
            whole = value.full_tensor() if isinstance(value, DTensor) else value
            if writer == rank:
                mine.setdefault(file_name, {})[name] = whole
            del whole
    for file_name, tensors in mine.items():
        _write_file(directory / file_name, tensors)
        tensors.clear()
    if len(files) > 1 and rank == 0:
        mapping = {name: file_name for file_name, names in zip(files, groups, strict=True) for name in names}
        total = sum(_global_nbytes(value) for value in weights.values())
        index_path = directory / INDEX_NAME
        index_path.write_text(json.dumps(index_document(mapping, total), indent=2) + "\n",
                              encoding="utf-8")


@contextmanager
def _opened(directory: Path, mapping: Mapping[str, str], where: str, device: str = "cpu") -> Iterator[
        Callable[[str], Any]]:
    """A function giving the open ``safe_open`` handle of the file that holds a tensor name."""
    handles: dict[str, Any] = {}
    with ExitStack() as stack:
        def handle_of(name: str) -> Any:
            file_name = mapping[name]
            if file_name not in handles:
                try:
                    handles[file_name] = stack.enter_context(safe_open(str(directory / file_name), framework="pt",
                                                                       device=device))
                except (SafetensorError, OSError) as error:
                    raise _unreadable(directory / file_name, where, error) from None
            return handles[file_name]

        yield handle_of


def _unreadable(path: Path, where: str, error: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{str(path)!r} (in the checkpoint {where!r}) is not a readable safetensors file ({type(error).__name__}: "
        f"{error}); it is truncated or damaged: restore it from a copy or use an earlier checkpoint."
    )


def read_all(directory: Path, mapping: Mapping[str, str], where: str, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Every tensor of the weights, whole, in ``mapping``'s order."""
    weights: dict[str, torch.Tensor] = {}
    with _opened(directory, mapping, where, device) as handle_of:
        for name in mapping:
            try:
                weights[name] = handle_of(name).get_tensor(name)
            except SafetensorError as error:
                raise _unreadable(directory / mapping[name], where, error) from None
    return weights


def _target(path: str | os.PathLike[str]) -> tuple[Path, dict[str, str]]:
    location = Path(path)
    if location.is_file() and location.suffix == ".safetensors":
        return location.parent, {name: location.name for name in sorted(read_header(location, str(path)))}
    if not location.exists():
        raise CheckpointError(f"No weights at {str(path)!r}: the path does not exist.")
    mapping = weight_map(location, str(path)) if location.is_dir() else None
    if mapping is None:
        raise CheckpointError(
            f"{str(path)!r} holds no safetensors weights: expected a directory with model.safetensors or "
            f"{INDEX_NAME} (and its shards), or a .safetensors file."
        )
    return location, mapping


def read_weights(path: str | os.PathLike[str], device: str = "cpu") -> dict[str, torch.Tensor]:
    """Read the weights at ``path`` whole: a directory (``model.safetensors`` or shards with the index), or one
    ``.safetensors`` file, written by this project or by anything else.

    :raises core.CheckpointError: nothing readable there, naming the path and what was expected.
    """
    directory, mapping = _target(path)
    return read_all(directory, mapping, str(path), device)


def _describe(shape: Any) -> str:
    return str(tuple(shape))


def _check_fits(module: torch.nn.Module, expected: Mapping[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]], strict: bool, where: str) -> None:
    wrong = [f"{name}: file {_describe(shapes[name])} vs module {_describe(value.shape)}"
             for name, value in expected.items() if name in shapes and tuple(value.shape) != tuple(shapes[name])]
    absent = [f"{name} {_describe(value.shape)}" for name, value in expected.items() if name not in shapes]
    extra = [f"{name} {_describe(shape)}" for name, shape in shapes.items() if name not in expected]
    raise_if_mismatched(
        f"The weights {where!r}", "the files", type(module).__name__,
        wrong=wrong, absent=absent, extra=extra, strict=strict, shown=_SHOWN, plural=True,
    )


def local_box(tensor: DTensor) -> list[tuple[int, int]] | None:
    """``(offset, length)`` per dimension of this rank's part of ``tensor``; ``None`` for placements other than
    ``Shard`` and ``Replicate`` (read whole, then cut)."""
    mesh = tensor.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return [(0, 0) for _ in tensor.shape]
    box = [(0, size) for size in tensor.shape]
    for mesh_dim, placement in enumerate(tensor.placements):
        if type(placement) is Replicate:
            continue
        if type(placement) is not Shard:
            return None
        dim = placement.dim
        offset, length = box[dim]
        chunk = math.ceil(length / mesh.size(mesh_dim)) if length else 0
        start = min(coordinate[mesh_dim] * chunk, length)
        box[dim] = (offset + start, max(0, min(chunk, length - start)))
    return box


def load_weights(module: torch.nn.Module, path: str | os.PathLike[str], strict: bool = True) -> int:
    """Copy the weights at ``path`` into ``module`` in place, reading only this rank's part of each tensor.

    ``module`` may be whole, or sharded by ``fsdp`` / ``model_parallel`` (its parameters ``DTensor``s): then each rank
    reads its own slice of each tensor from the files (``get_slice``), never the whole tensor. No collective: ranks
    may call it at different times. ``path`` is what :func:`read_weights` takes.

    :param strict: Every tensor of the module must be in the files and the other way round; shapes must match
        either way.
    :return: How many bytes of tensor data this process read.
    :raises core.CheckpointError: the files do not fit the module (naming the keys and both shapes), or are
        unreadable.
    """
    directory, mapping = _target(path)
    where = str(path)
    shapes: dict[str, tuple[int, ...]] = {}
    for file_name in dict.fromkeys(mapping.values()):
        for name, entry in read_header(directory / file_name, where).items():
            shapes[name] = tuple(entry["shape"])
    expected = module.state_dict()
    _check_fits(module, expected, {name: shapes[name] for name in mapping if name in shapes}, strict, where)
    read = 0
    with torch.no_grad(), _opened(directory, mapping, where) as handle_of:
        for name, value in expected.items():
            if name not in mapping:
                continue
            try:
                read += _load_one(handle_of(name), name, value)
            except SafetensorError as error:
                raise _unreadable(directory / mapping[name], where, error) from None
    return read


def _load_one(handle: Any, name: str, value: torch.Tensor) -> int:
    if not isinstance(value, DTensor):
        loaded = handle.get_tensor(name)
        value.copy_(loaded)
        return int(loaded.nbytes)
    local = value.to_local()
    box = local_box(value)
    if box is None:  # an exotic placement (strided shards of fsdp over tensor parallelism): cut the whole tensor
        whole = handle.get_tensor(name)
        local.copy_(distribute_tensor(whole, value.device_mesh, value.placements, src_data_rank=None).to_local())
        return int(whole.nbytes)
    if not box:
        part = handle.get_tensor(name)
    else:
        part = handle.get_slice(name)[tuple(slice(offset, offset + length) for offset, length in box)]
    if tuple(part.shape) != tuple(local.shape):
        raise CheckpointError(
            f"The slice of {name!r} read for this rank has the shape {tuple(part.shape)}, but the module's part "
            f"has {tuple(local.shape)} ({value.placements} over {value.device_mesh}); load the whole tensor with "
            f"read_weights and shard it yourself."
        )
    local.copy_(part)
    return int(part.nbytes)
