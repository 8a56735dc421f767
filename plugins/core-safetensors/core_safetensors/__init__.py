"""core-safetensors: Hugging Face's safetensors weight format for ``core``.

The ``safetensors`` checkpoint_io (``plugins=["safetensors"]``, or ``SafetensorsCheckpointIO(max_shard_size=...)``)
writes a checkpoint as a directory whose weights are ``model.safetensors`` (or shards with
``model.safetensors.index.json``), from a single-device, ``ddp``, ``fsdp`` or ``model_parallel`` run, with the rest
of the state beside them in the project's own format. :func:`save_weights`, :func:`read_weights` and
:func:`load_weights` do the same for a module's weights alone; :func:`load_weights` reads only a sharded module's
own slices. ``python -m core.checkpoint convert`` turns ``distributed`` checkpoints into this format and back.
"""

from __future__ import annotations

from ._api import save_weights
from ._checkpoint_io import STATE_DIRECTORY, STATE_FILE, WEIGHTS_KEYS, SafetensorsCheckpointIO
from ._format import INDEX_NAME, WEIGHTS_NAME, parse_size, plan_shards, shard_file_names
from ._weights import load_weights, read_weights

__all__ = [
    "INDEX_NAME",
    "STATE_DIRECTORY",
    "STATE_FILE",
    "WEIGHTS_KEYS",
    "WEIGHTS_NAME",
    "SafetensorsCheckpointIO",
    "load_weights",
    "parse_size",
    "plan_shards",
    "read_weights",
    "save_weights",
    "shard_file_names",
]
