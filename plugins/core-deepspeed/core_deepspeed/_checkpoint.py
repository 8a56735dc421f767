"""DeepSpeed checkpoints: a directory in which every rank writes its shard, and the consolidated fp32 weights.

Layout of ``Lite.save("ckpt", state)`` (DeepSpeed's own)::

    ckpt/latest                          the tag of the checkpoint ("checkpoint")
    ckpt/checkpoint/*model_states.pt     the module (stage 3: one shard per rank) and the client state
    ckpt/checkpoint/*optim_states.pt     one optimizer shard per rank
    ckpt/zero_to_fp32.py                 DeepSpeed's script, which rebuilds the full fp32 weights offline

The directory is written as ``ckpt.partial`` and renamed once every rank has finished, so a crash mid-write
leaves the previous checkpoint in place. All ranks must see the same filesystem.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import torch

from core import CheckpointError

TAG: Final = "checkpoint"

META_KEY: Final = "core/deepspeed"
"""The one client-state entry ``Lite.save`` adds to DeepSpeed's files: ``{"module": key, "optimizer": key or None,
"state": {the other entries of the state}}``. One nested entry, so that no key of the user's state can collide
with DeepSpeed's own (``module``, ``optimizer``, ``global_steps``, ...)."""

DEEPSPEED_RECORDS: Final = frozenset({
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
})
"""The classes DeepSpeed pickles into its checkpoint files, besides tensors and plain containers.

DeepSpeed reads its files with ``weights_only=False``; under ``weights_only=True`` every file is scanned first
and refused if its pickle names any other global."""


def is_deepspeed_checkpoint(path: str | Path) -> bool:
    return (Path(path) / "latest").is_file()


def _check_target(target: Path) -> None:
    if target.exists() and not is_deepspeed_checkpoint(target):
        raise CheckpointError(
            f"Lite.save({str(target)!r}) under DeepSpeed writes a checkpoint directory, but {str(target)!r} exists "
            f"and is not a DeepSpeed checkpoint (no 'latest' file in it); it is left untouched. Choose another path."
        )


def save_sharded(
    engine: Any, path: str, client_state: dict[str, Any], is_global_zero: bool, barrier: Callable[[str], None]
) -> None:
    """Every rank writes its shard of ``engine`` through DeepSpeed into ``path`` (a directory), atomically."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    _check_target(target)  # on every rank, so that all of them refuse together
    if is_global_zero and partial.exists():
        shutil.rmtree(partial)  # left behind by a crash during an earlier save
    barrier("deepspeed save: prepare")
    engine.save_checkpoint(str(partial), tag=TAG, client_state=client_state)
    barrier("deepspeed save: written")
    if is_global_zero:
        previous = target.with_name(target.name + ".previous")
        if target.exists():
            target.rename(previous)
        partial.rename(target)
        if previous.exists():
            shutil.rmtree(previous)
    barrier("deepspeed save: renamed")


def read_tag(path: str | Path) -> str:
    """The tag (subdirectory) that ``path/latest`` names in a DeepSpeed checkpoint directory; a
    ``CheckpointError`` when ``path`` is not one."""
    latest = Path(path) / "latest"
    if not latest.is_file():
        raise CheckpointError(
            f"{str(path)!r} is not a DeepSpeed checkpoint directory: it has no 'latest' file. Pass the directory "
            f"that Lite.save wrote under a DeepSpeed strategy."
        )
    return latest.read_text().strip()


def check_weights_only(path: str | Path) -> None:
    """Refuse a checkpoint whose files would unpickle anything but tensors, containers and DeepSpeed's records."""
    directory = Path(path) / read_tag(path)
    files = sorted(directory.glob("*.pt"))
    if not files:
        raise CheckpointError(f"The DeepSpeed checkpoint {str(path)!r} has no *.pt files in {str(directory)!r}.")
    for file in files:
        unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(file)) - DEEPSPEED_RECORDS
        if unsafe:
            raise CheckpointError(
                f"{str(file)!r} holds objects of {sorted(unsafe)}, which weights_only=True refuses to unpickle "
                f"(accepted: tensors, plain containers and DeepSpeed's {sorted(DEEPSPEED_RECORDS)}). Pass "
                f"weights_only=False only for a checkpoint you trust."
            )


def _client_state(directory: Path) -> dict[str, Any]:
    states = sorted(directory.glob("*model_states.pt"))
    if not states:
        raise CheckpointError(f"The DeepSpeed checkpoint {str(directory)!r} has no *model_states.pt file.")
    # Checked by check_weights_only when asked; DeepSpeed's records need the full unpickler.
    saved: dict[str, Any] = torch.load(states[0], map_location="cpu", weights_only=False)
    return saved


def load_consolidated(path: str | Path, weights_only: bool = True) -> dict[str, Any]:
    """The checkpoint as ``Lite.save`` was given it, with the module's weights rebuilt in full precision.

    The module's entry is the full fp32 state dict (DeepSpeed's ``zero_to_fp32``), loadable into the plain
    ``torch.nn.Module``; plain values come back as saved; the optimizer's shards are left out. Runs in one
    process, without a process group: on rank 0 of a run, or offline.

    :param path: A directory written by ``Lite.save`` under a DeepSpeed strategy.
    :param weights_only: Refuse files that would unpickle anything but tensors, containers and DeepSpeed's records.
    """
    tag = read_tag(path)
    if weights_only:
        check_weights_only(path)
    saved = _client_state(Path(path) / tag)
    meta = saved.get(META_KEY)
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"The DeepSpeed checkpoint {str(path)!r} was not written by Lite.save (it has no {META_KEY!r} entry); "
            f"rebuild its weights with DeepSpeed's {str(Path(path) / 'zero_to_fp32.py')!r}."
        )
    zero_to_fp32 = importlib.import_module("deepspeed.utils.zero_to_fp32")
    weights = zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(str(path), tag=tag)
    prefix = meta.get("module_prefix", "")
    result = dict(meta["state"])
    result[meta["module"]] = {key.removeprefix(prefix): value for key, value in weights.items()}
    return result
