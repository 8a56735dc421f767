"""Checkpoint state and single checkpoint files, for strategies and checkpoint_io plugins (imports torch).

:func:`to_checkpoint` and :func:`restore_state` convert between a ``Lite.save`` state (modules, optimizers,
plain values) and what is written, as the built-in strategies do; :func:`is_stateful` tells whether an object
has ``state_dict`` / ``load_state_dict``; :data:`PRECISION_KEY` is where the precision plugin's own state is kept;
:func:`raise_if_mismatched` is the one error for saved tensors that do not fit a module (other shapes, keys missing
on either side), for a checkpoint_io that loads weights itself.

:func:`atomic_torch_save` writes ``torch.save`` through a temporary file, fsync and rename (local paths) or a
single upload (fsspec URLs), so a reader never sees half a checkpoint; :func:`safe_torch_load` and
:func:`torch_load_from` load with ``weights_only`` and turn torch's unpickling errors into
:class:`core.CheckpointError` naming the file and the way out. The files :func:`atomic_torch_save` writes carry an
xxHash checksum of their bytes (in the zip archive's comment, so plain ``torch.load`` still reads them), which the
loaders verify before unpickling: a flipped bit is an error naming the file and the tensor, never a changed value.
A save that fills the filesystem is a :class:`core.CheckpointError` naming the errno, the bytes needed and free, and
the mount (:func:`atomic_torch_save` does it itself; :func:`reporting_full_disk` around any other writer, with
:func:`tensor_bytes`, what a checkpoint's tensors take).

:func:`seal_directory` does the same for a checkpoint written as a directory (a checksum file listing each file's
digest, and each tensor's byte range where the writer knows it); :func:`verify_directory` checks it.
:class:`DirectoryCheckpointIO` is the base of a checkpoint_io writing such directories with every rank taking part
(core-dcp, core-safetensors); :func:`install_directory` moves a finished one into place atomically.

:func:`lazy_load` reads a ``torch.save`` file with every tensor a :class:`NotYetLoadedTensor`, memory-mapped and
read on first use (Lightning's ``lightning.fabric.utilities.load._lazy_load``); :func:`materialize_tensors` reads
all of a collection's at once.
"""

from core.toolkit._checkpoint_state import PRECISION_KEY, is_stateful, raise_if_mismatched, to_checkpoint
from core.toolkit._checkpoint_state import restore as restore_state
from core.toolkit._checksums import seal_directory, verify_directory
from core.toolkit._directories import DirectoryCheckpointIO, install_directory
from core.toolkit._lazy_load import NotYetLoadedTensor, lazy_load, materialize_tensors
from core.toolkit._torch_files import (
    atomic_torch_save,
    reporting_full_disk,
    safe_torch_load,
    tensor_bytes,
    torch_load_from,
)

__all__ = [
    "PRECISION_KEY",
    "DirectoryCheckpointIO",
    "NotYetLoadedTensor",
    "atomic_torch_save",
    "install_directory",
    "is_stateful",
    "lazy_load",
    "materialize_tensors",
    "raise_if_mismatched",
    "reporting_full_disk",
    "restore_state",
    "safe_torch_load",
    "seal_directory",
    "tensor_bytes",
    "to_checkpoint",
    "torch_load_from",
    "verify_directory",
]
