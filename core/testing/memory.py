"""Tensor memory a block of code allocates on this rank, counted exactly (for tests of sharded strategies).

CPU memory has no allocator statistics like ``torch.cuda.max_memory_allocated``, and process-wide measures (RSS,
tracemalloc) are noisy or blind to torch's allocator. :class:`AllocatedTensors` counts instead the bytes of every
tensor the ATen operators return while it is active (a ``TorchDispatchMode``), and follows each until it is freed:
its :attr:`~AllocatedTensors.peak_bytes` is the most those tensors held at once. Deterministic: the same code
allocates the same tensors on every run.

What it sees: operators called on plain tensors, which is where a gather allocates (``DTensor.full_tensor`` runs
the collectives on the local shards). Operators called on a ``DTensor`` count as the tensor they return, not the
work inside the ``DTensor``'s dispatch. Tensors allocated before the block and still alive are not counted: add
the module's own footprint (:func:`local_bytes`) to get a rank's total.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class AllocatedTensors(TorchDispatchMode):
    """``with AllocatedTensors() as allocated: ...``, then read its ``peak_bytes``, ``largest_bytes``, ``total_bytes``.

    Tensors sharing a storage (views) count once, by their storage's size.
    """

    def __init__(self) -> None:
        super().__init__()
        self._alive: dict[int, tuple[weakref.ref[torch.Tensor], int, int]] = {}  # id -> (tensor, storage, bytes)
        self.peak_bytes = 0
        """The most bytes the tensors allocated in the block held at one time."""
        self.largest_bytes = 0
        """The largest single storage allocated in the block."""
        self.total_bytes = 0
        """Every storage allocated in the block, added up (freed or not)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        known = {storage for _, storage, _ in self._alive.values()}
        inputs = {tensor.untyped_storage().data_ptr() for tensor in tree_leaves((args, kwargs or {}))
                  if type(tensor) is torch.Tensor}
        result = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(result):
            if type(tensor) is not torch.Tensor or tensor.is_meta:
                continue
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer in inputs and pointer not in known:
                continue  # a view of memory allocated before the block: not the block's
            if pointer not in known:  # new memory
                self.largest_bytes = max(self.largest_bytes, storage.nbytes())
                self.total_bytes += storage.nbytes()
                known.add(pointer)
            self._alive[id(tensor)] = (weakref.ref(tensor), pointer, storage.nbytes())
        self._measure()
        return result

    def _measure(self) -> None:
        held: dict[int, int] = {}
        for key, (reference, pointer, size) in list(self._alive.items()):
            if reference() is None:
                del self._alive[key]
            else:
                held[pointer] = size
        self.peak_bytes = max(self.peak_bytes, sum(held.values()))

    def __exit__(self, *exc_info: Any) -> None:
        self._measure()
        super().__exit__(*exc_info)


def local_bytes(module: torch.nn.Module) -> int:
    """The bytes of ``module``'s parameters and buffers held on this rank: a ``DTensor``'s local part only."""
    total = 0
    for tensor in (*module.parameters(), *module.buffers()):
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total
