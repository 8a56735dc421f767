"""Lightning's ``FSDPStrategy`` arguments (FSDP1) in FSDP2's terms: what each means here, taken or refused.

Lightning's strategy wraps ``FullyShardedDataParallel`` (FSDP1); this one applies ``fully_shard`` (FSDP2). Each
FSDP1 argument either has an FSDP2 meaning (``sharding_strategy`` is ``reshard_after_forward`` and the mesh's shape,
``cpu_offload=CPUOffload(...)`` a ``CPUOffloadPolicy``, ``MixedPrecision`` a ``MixedPrecisionPolicy``), none (taken
with a one-time note: :data:`IGNORED`), or one the user must express otherwise (refused: :data:`REFUSED`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Final

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from core import ConfigurationError, CoreDeprecationWarning
from core.toolkit.strategies import RUN_ARGUMENTS

SHARDING_STRATEGIES: Final = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD")
"""Lightning's (FSDP1's ``ShardingStrategy``) names; see :func:`sharding_of` for what each is here."""

IGNORED: Final[Mapping[str, str]] = {
    "limit_all_gathers": "FSDP2 has no all-gather rate limiter; it frees each unit's gathered parameters through its "
                         "own stream ordering (memory stays bounded without it)",
    "use_orig_params": "FSDP2 always keeps the original parameters (as DTensor shards)",
    "forward_prefetch": "FSDP2 prefetches the next unit's all-gather by itself; to change the order, call "
                        "set_modules_to_forward_prefetch on the sharded units",
    "backward_prefetch": "FSDP2 prefetches the previous unit in backward by itself; to change the order, call "
                         "set_modules_to_backward_prefetch on the sharded units",
    "device_id": "the parameters are sharded on the run's device",
}
"""FSDP1 keywords with no FSDP2 meaning: taken, with a one-time note saying why."""

REFUSED: Final[Mapping[str, str]] = {
    **RUN_ARGUMENTS,
    "param_init_fn": "create the model inside lite.init_module(empty_init=True) (configure_model under the Trainer): "
                     "each rank allocates its shards and runs reset_parameters there",
    "ignored_modules": "FSDP2 shards every parameter of a unit; keep a module out of the units with auto_wrap_policy, "
                       "or set it up apart from the sharded model",
    "ignored_states": "FSDP2 shards every parameter of a unit; keep a module out of the units with auto_wrap_policy",
    "process_group": "the strategy shards over the run's process group (HYBRID_SHARD with device_mesh=(replicas, "
                     "shards) for a 2-D layout)",
}
"""FSDP1 keywords refused: name -> why, and what to write instead."""


def sharding_of(owner: str, sharding_strategy: Any, reshard_after_forward: bool | int) -> tuple[bool | int, bool]:
    """``(reshard_after_forward, hybrid)`` for Lightning's ``sharding_strategy`` (a name or FSDP1's enum).

    ``FULL_SHARD`` keeps ``reshard_after_forward`` as given (``True`` by default); ``SHARD_GRAD_OP`` is
    ``reshard_after_forward=False`` (ZeRO-2: parameters stay gathered from forward to backward); ``HYBRID_SHARD``
    shards within a group of ranks and replicates across groups (a 2-D mesh); ``_HYBRID_SHARD_ZERO2`` is both.
    ``NO_SHARD`` is refused: that is data parallelism, ``strategy="ddp"``.
    """
    name = getattr(sharding_strategy, "name", sharding_strategy)  # FSDP1's ShardingStrategy enum, or its name
    name = name.upper() if isinstance(name, str) else name
    if name not in SHARDING_STRATEGIES:
        raise ConfigurationError(
            f"{owner}(sharding_strategy={sharding_strategy!r}) is not a sharding strategy; expected one of "
            f"{list(SHARDING_STRATEGIES)}."
        )
    if name == "NO_SHARD":
        raise ConfigurationError(
            f"{owner}(sharding_strategy='NO_SHARD') would replicate every parameter on every rank, which is data "
            f"parallelism: use strategy='ddp' (DDPStrategy, pip install core-ddp)."
        )
    if name in ("SHARD_GRAD_OP", "_HYBRID_SHARD_ZERO2"):
        reshard_after_forward = False
    return reshard_after_forward, name in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


def check_device_mesh(owner: str, device_mesh: Any, hybrid: bool) -> tuple[int, int] | None:
    """``device_mesh`` as ``(replicas, shards)``, ``None`` when not given; refused without ``HYBRID_SHARD``."""
    if device_mesh is None:
        return None
    if not (isinstance(device_mesh, tuple) and len(device_mesh) == 2
            and all(isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in device_mesh)):
        raise ConfigurationError(
            f"{owner}(device_mesh={device_mesh!r}): expected the sizes (replicas, shards) as a tuple of two positive "
            f"ints; a DeviceMesh object cannot be passed, since the strategy builds its mesh once the processes exist."
        )
    if not hybrid:
        raise ConfigurationError(
            f"{owner}(device_mesh={device_mesh!r}) lays the ranks out as (replicas, shards), which only "
            f"sharding_strategy='HYBRID_SHARD' uses; pass both, or neither."
        )
    return device_mesh[0], device_mesh[1]


def activation_checkpointing_policy_of(owner: str, activation_checkpointing: Any, policy: Any) -> Any:
    """Lightning's deprecated ``activation_checkpointing`` (a class or a list of classes) as the policy."""
    if activation_checkpointing is None:
        return policy
    if policy is not None:
        raise ConfigurationError(
            f"{owner} got both activation_checkpointing and activation_checkpointing_policy; pass only the latter."
        )
    classes = activation_checkpointing if isinstance(activation_checkpointing, list) else [activation_checkpointing]
    warnings.warn(
        f"{owner}(activation_checkpointing={activation_checkpointing!r}) is deprecated (as in Lightning); write "
        f"activation_checkpointing_policy={{{', '.join(getattr(c, '__name__', repr(c)) for c in classes)}}}.",
        CoreDeprecationWarning,
        stacklevel=4,
    )
    return set(classes)


def cpu_offload_of(cpu_offload: Any) -> bool:
    """Whether to keep the shards on the CPU: a bool, ``None``, or FSDP1's ``CPUOffload(offload_params=...)``."""
    return bool(getattr(cpu_offload, "offload_params", cpu_offload))


def mixed_precision_of(owner: str, mixed_precision: Any) -> MixedPrecisionPolicy | None:
    """A ``MixedPrecisionPolicy`` as it is; FSDP1's ``MixedPrecision`` converted (its dtypes); ``None`` as it is."""
    if mixed_precision is None or isinstance(mixed_precision, MixedPrecisionPolicy):
        return mixed_precision
    param_dtype = getattr(mixed_precision, "param_dtype", None)
    reduce_dtype = getattr(mixed_precision, "reduce_dtype", None)
    if type(mixed_precision).__name__ == "MixedPrecision" and all(
        dtype is None or isinstance(dtype, torch.dtype) for dtype in (param_dtype, reduce_dtype)
    ):
        return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    raise ConfigurationError(
        f"{owner}(mixed_precision={mixed_precision!r}): expected a torch.distributed.fsdp.MixedPrecisionPolicy (or "
        f"FSDP1's MixedPrecision, converted), or None to follow the run's precision."
    )
