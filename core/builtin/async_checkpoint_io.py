"""The ``async`` checkpoint_io: the training loop goes on while the checkpoint is written.

A save first waits for the previous one (so saves land in the order they were made, and at most one
snapshot is held in memory besides the training state), then copies every tensor of the checkpoint to
the CPU (``clone`` for CPU tensors: the training step that follows may change them in place), and hands
the copy to one background thread, which writes it exactly as the ``torch`` checkpoint_io does: atomically,
to a local path or an fsspec URL. The save returns once the copy is made, or for CUDA tensors once it is
queued: they are copied into pinned host buffers (kept and reused by the next save) with ``non_blocking`` copies
on each device's current stream, so the loop's next kernels, queued after them, cannot change what is copied, and
the writer thread waits for the copies' event before it writes.

An error in the background is never lost: it is raised by the next save, load or remove, or at the end of
the run by ``checkpoint_io_teardown``, as a :class:`core.CheckpointError` naming the path that failed.
Loads and removals first wait for the write in flight, so they never overtake it. A process that ends
without a teardown still finishes its last write: the writer thread is joined at exit.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import torch

from core._errors import CheckpointError
from core._markers import hookimpl
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.toolkit.checkpoint import atomic_torch_save
from core.toolkit.tensors import apply_to_tensors


class PinnedBuffers:
    """Pinned host buffers for the CUDA tensors of successive snapshots, reused while the shapes stay the same.

    Allocating pinned memory is slow (it is locked page by page), and a training loop saves the same shapes every
    time; the buffers are reused from the second save on. A save may reuse them only once the previous write is
    finished (:class:`AsyncCheckpointIO` waits for it first).
    """

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._used = 0

    def start(self) -> None:
        self._used = 0

    def copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of the CUDA ``tensor``, queued on its device's current stream (``non_blocking``)."""
        index, self._used = self._used, self._used + 1
        if index < len(self._buffers):
            host = self._buffers[index]
            if host.shape != tensor.shape or host.dtype != tensor.dtype:
                host = self._buffers[index] = _pinned_like(tensor)
        else:
            host = _pinned_like(tensor)
            self._buffers.append(host)
        host.copy_(tensor.detach(), non_blocking=True)
        return host

    def clear(self) -> None:
        self._buffers.clear()
        self._used = 0


def _pinned_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)


def _copy_to_host(tensor: torch.Tensor, pinned: PinnedBuffers, devices: set[torch.device]) -> torch.Tensor:
    if tensor.device.type == "cuda":
        devices.add(tensor.device)
        return pinned.copy(tensor)
    return tensor.detach().to("cpu", copy=True)


def snapshot(value: Any) -> Any:
    """A copy of ``value`` in which every tensor is a private CPU copy, taken synchronously.

    Containers (dicts with their attributes, lists, tuples, named tuples) are rebuilt by
    :func:`core.toolkit.tensors.apply_to_tensors`; a tensor reachable twice is copied once and shared in the copy
    too, so tied weights stay tied in the file. Other objects (numbers, strings, anything else) are kept by
    reference: copying an arbitrary object means calling its ``__reduce__``, which may run code, and the state a
    loop changes in place is its tensors.
    """
    return apply_to_tensors(value, lambda tensor: tensor.detach().to("cpu", copy=True))


def queued_snapshot(value: Any, pinned: PinnedBuffers) -> tuple[Any, Callable[[], None]]:
    """As :func:`snapshot`, but CUDA tensors are copied into ``pinned``'s buffers with ``non_blocking`` copies on
    their devices' current streams; returns the copy and a function that waits until those copies are done (call
    it before reading the copy, from any thread). CPU tensors are copied at once."""
    devices: set[torch.device] = set()
    pinned.start()
    copied = apply_to_tensors(value, lambda tensor: _copy_to_host(tensor, pinned, devices))
    events = []
    for device in devices:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        events.append(event)

    def finished() -> None:
        for event in events:
            event.synchronize()

    return copied, finished


class AsyncCheckpointIO(TorchCheckpointIO):
    """``torch`` checkpoints written by a background thread after a synchronous copy to the CPU.

    :param storage_options: ``fsspec`` filesystem options used for every URL this plugin reads or writes.
    """

    name: Final = "async"  # type: ignore[misc]

    def __init__(self, storage_options: dict[str, Any] | None = None, checksums: bool = True) -> None:
        super().__init__(storage_options, checksums)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[str, Future[None]]] = deque()
        self._lock = threading.Lock()
        self._pinned = PinnedBuffers()

    def _submit(self, description: str, work: Callable[[], None]) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="core-async-checkpoint")
            self._pending.append((description, self._executor.submit(work)))

    def wait(self) -> None:
        """Block until the write in flight is done; raise its failure, if any."""
        failures: list[tuple[str, BaseException]] = []
        while self._pending:
            description, future = self._pending[0]
            error = future.exception()
            self._pending.popleft()
            if error is not None:
                failures.append((description, error))
        if failures:
            description, error = failures[0]
            others = f" ({len(failures) - 1} later background write(s) failed too)" if len(failures) > 1 else ""
            raise CheckpointError(
                f"The background {description} failed: {type(error).__name__}: {str(error).rstrip('.')}{others}. "
                f"Nothing newer than the last successful save was written there; fix the cause (disk space, "
                f"permissions, an object torch.save cannot pickle) and save again."
            ) from error

    @property
    def pending(self) -> int:
        """How many writes are queued or running (0 or 1: a save waits for the previous one)."""
        return sum(1 for _, future in self._pending if not future.done())

    @hookimpl
    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        options = self._options(path, storage_options)
        self.wait()  # the previous write is done: its pinned buffers may be reused
        copied, copied_in_full = queued_snapshot(checkpoint, self._pinned)

        def write() -> None:
            copied_in_full()
            atomic_torch_save(copied, path, options, checksum=self.checksums)

        self._submit(f"save to {path!r}", write)

    @hookimpl
    def checkpoint_io_load(self, path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
        self.wait()
        return super().checkpoint_io_load(path=path, map_location=map_location, weights_only=weights_only)

    @hookimpl
    def checkpoint_io_remove(self, path: str) -> None:
        self.wait()
        super().checkpoint_io_remove(path=path)

    @hookimpl
    def checkpoint_io_teardown(self) -> None:
        try:
            self.wait()
        finally:
            with self._lock:
                executor, self._executor = self._executor, None
            if executor is not None:
                executor.shutdown(wait=True)
            self._pinned.clear()
