"""Saving a module's weights alone, as a Hugging Face weights directory."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from ._checkpoint_io import SafetensorsCheckpointIO


def save_weights(weights: torch.nn.Module | Mapping[str, torch.Tensor], path: str | os.PathLike[str],
                 max_shard_size: int | str | None = None, writers: str = "all", checksums: bool = True) -> None:
    """Write a module's weights (or a state dict) to the directory ``path``, as ``model.safetensors`` or as shards
    of at most ``max_shard_size`` with ``model.safetensors.index.json``, atomically.

    For a module sharded by ``fsdp`` or ``model_parallel``, every rank calls it (the shards are gathered to the
    writers, see :class:`SafetensorsCheckpointIO`); otherwise one process calls it with whole tensors.
    """
    state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
    io = SafetensorsCheckpointIO(weights_key="model", max_shard_size=max_shard_size, writers=writers,
                                 checksums=checksums)
    io.checkpoint_io_save(checkpoint={"model": state}, path=os.fspath(path), storage_options=None)
