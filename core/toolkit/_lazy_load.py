"""A ``torch.save`` file read lazily: tensors stay in the memory-mapped archive until a tensor is used.

Lightning's ``lightning.fabric.utilities.load._lazy_load`` (after Thomas Viehmann's torchhacks): the pickle is read
with an unpickler that rebuilds every tensor as a :class:`NotYetLoadedTensor` (its metadata on the meta device),
whose storage is read from the archive on first use (any torch function, ``.to``, ``.data``, ...). A checkpoint far
larger than memory loads in an instant and a ``load_state_dict`` copies one tensor at a time.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from io import BytesIO
from typing import IO, Any, cast

import torch
from torch import Tensor

from core._errors import CheckpointError
from core.toolkit._collections import apply_to_tensors

# Read through the meta tensor, without loading the storage (Lightning's list).
_METADATA_ATTRIBUTES = frozenset({
    "dtype", "grad", "grad_fn", "is_meta", "layout", "names", "ndim", "output_nr", "requires_grad", "retains_grad",
    "size", "shape", "volatile",
})
# Lightning loads the tensor for these (quantisation in litgpt reads them).
_LOADING_ATTRIBUTES = frozenset({"contiguous", "cuda", "half", "data", "to"})


class NotYetLoadedTensor:
    """A tensor of a lazily loaded file: its shape and dtype at once, its values on first use (:meth:`load`)."""

    def __init__(self, metatensor: Tensor, archive: _LazyUnpickler, storage_info: tuple[Any, ...],
                 rebuild_args: tuple[Any, ...]) -> None:
        self.metatensor = metatensor
        self.archiveinfo = archive
        self.storageinfo = storage_info
        self.rebuild_args = rebuild_args
        self._loader: Callable[[], Tensor] = self._read

    def load(self) -> Tensor:
        """Read the tensor from the archive (memory-mapped when the file was), as ``torch.load`` would return it."""
        return self._loader()

    _load_tensor = load  # Lightning's name, which litgpt calls

    def _read(self) -> Tensor:
        from torch.storage import TypedStorage

        _, _, key, _, numel = self.storageinfo
        dtype = self.metatensor.dtype
        storage = self.archiveinfo.record_storage(f"data/{key}", numel * torch._utils._element_size(dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TypedStorage is deprecated, and the only way to give the dtype here
            typed = TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
        return torch._utils._rebuild_tensor_v2(typed, *self.rebuild_args)

    def _then(self, finish: Callable[[Tensor], Tensor]) -> NotYetLoadedTensor:
        read = self._loader
        self._loader = lambda: finish(read())
        return self

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Sequence[type], args: Sequence[Any] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        loaded = [arg.load() if isinstance(arg, NotYetLoadedTensor) else arg for arg in args]
        return func(*loaded, **(kwargs or {}))

    @property
    def device(self) -> torch.device:
        return torch.device(self.storageinfo[3])

    def __getattr__(self, name: str) -> Any:
        if name in _METADATA_ATTRIBUTES:
            return getattr(self.metatensor, name)
        if name in _LOADING_ATTRIBUTES:
            return getattr(self.load(), name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metatensor!r})"


def _rebuild_tensor(storage: Any, storage_offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    requires_grad: bool, backward_hooks: OrderedDict[Any, Any], metadata: Any = None, *,
                    archive: _LazyUnpickler) -> NotYetLoadedTensor:
    rebuild_args = (storage_offset, size, stride, requires_grad, backward_hooks, metadata)
    metatensor = torch._utils._rebuild_tensor_v2(storage, *rebuild_args)
    return NotYetLoadedTensor(metatensor, archive, storage.archiveinfo, rebuild_args)


def _rebuild_from_type(func: Callable[..., Any], new_type: type, args: tuple[Any, ...], state: dict[str, Any], *,
                       archive: _LazyUnpickler) -> Any:
    built = func(*args)
    if isinstance(built, NotYetLoadedTensor):
        return built._then(lambda tensor: torch._tensor._rebuild_from_type_v2(lambda: tensor, new_type, (), state))
    return torch._tensor._rebuild_from_type_v2(func, new_type, args, state)


def _rebuild_parameter(data: Any, requires_grad: bool, backward_hooks: OrderedDict[Any, Any], *,
                       archive: _LazyUnpickler) -> Any:
    if isinstance(data, NotYetLoadedTensor):
        return data._then(lambda tensor: torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks))
    return torch._utils._rebuild_parameter(data, requires_grad, backward_hooks)


_REBUILDERS: dict[tuple[str, str], Callable[..., Any]] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _LazyUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], path: str, file_reader: torch.PyTorchFileReader) -> None:
        super().__init__(file)
        self.path = path
        self.file_reader = file_reader
        self._mapped: torch.UntypedStorage | None = None

    def record_storage(self, record: str, nbytes: int) -> torch.UntypedStorage:
        """The bytes of one record: a slice of the whole file, memory-mapped (private) on the first read."""
        if self._mapped is None:
            mapped = torch.UntypedStorage.from_file(self.path, shared=False, nbytes=os.path.getsize(self.path))
            self._mapped = cast(torch.UntypedStorage, mapped)
        offset = self.file_reader.get_record_offset(record)  # type: ignore[attr-defined]  # not in torch's stubs
        return cast(torch.UntypedStorage, self._mapped[offset:offset + nbytes])

    def find_class(self, module: str, name: str) -> Any:
        rebuild = _REBUILDERS.get((module, name))
        if rebuild is not None:
            return partial(rebuild, archive=self)
        return super().find_class(module, name)

    def persistent_load(self, pid: tuple[Any, ...]) -> Any:
        from torch.storage import TypedStorage

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = TypedStorage(dtype=pid[1]().dtype, device="meta")
        storage.archiveinfo = pid  # type: ignore[attr-defined]
        return storage


def lazy_load(path: str | os.PathLike[str]) -> Any:
    """What ``torch.load(path)`` returns, with each tensor a :class:`NotYetLoadedTensor` read on first use.

    Lightning's ``lightning.fabric.utilities.load._lazy_load``, with the file memory-mapped (copy on write, as
    ``torch.load(mmap=True)`` does) rather than read record by record: a tensor's values are paged in when used.
    :func:`materialize_tensors` reads every tensor of a loaded collection at once. Like Lightning's, it unpickles
    the file (the classes it names are imported): load only files you trust.

    :raises core.CheckpointError: the path is not a file, or not an archive written by ``torch.save``.
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"lazy_load({str(path)!r}): no such file; expected a file written by torch.save.")
    try:
        file_reader = torch.PyTorchFileReader(str(path))
        record = file_reader.get_record("data.pkl")
    except RuntimeError as error:
        raise CheckpointError(
            f"lazy_load({str(path)!r}): not a torch.save archive ({error}); lazy loading needs the zip format "
            "torch.save writes by default (not _use_new_zipfile_serialization=False)."
        ) from error
    with BytesIO(record) as pickled:
        return _LazyUnpickler(pickled, str(path), file_reader).load()


def materialize_tensors(collection: Any) -> Any:
    """``collection`` with every :class:`NotYetLoadedTensor` in it (nested dicts, lists, tuples) read."""
    return apply_to_tensors(collection, NotYetLoadedTensor.load, leaf=NotYetLoadedTensor)
