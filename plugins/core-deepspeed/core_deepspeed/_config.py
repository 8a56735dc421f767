"""The DeepSpeed configuration of a run: keyword defaults, the precision's section, then the user's config on top.

Pure data and no imports of torch or deepspeed, so that building and checking a configuration is cheap and
happens when the run is resolved, long before any engine exists. The order of precedence, lowest first:

1. the defaults below (``zero_allow_untested_optimizer``, a micro-batch size DeepSpeed only logs);
2. the strategy's keywords (``stage``, ``offload_optimizer``, ``offload_parameters``, ``gradient_clipping``);
3. the precision of the run, as DeepSpeed's ``fp16`` / ``bf16`` section;
4. the user's ``config=`` (a dict or a JSON file), merged key by key, nested sections included.

A ``config=`` may refine the precision's section (a loss scale) but not contradict it: a run resolved to
``bf16-mixed`` whose config disables ``bf16`` is refused, naming both.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from core import ConfigurationError

STAGES: Final = (1, 2, 3)

PRECISION_SECTIONS: Final[dict[str, dict[str, Any]]] = {
    "32-true": {},
    "16-mixed": {"fp16": {"enabled": True}},
    "16-true": {"fp16": {"enabled": True}},
    "bf16-mixed": {"bf16": {"enabled": True}},
    "bf16-true": {"bf16": {"enabled": True}},
}
"""What each precision of the run becomes in DeepSpeed's config (as in Lightning): DeepSpeed keeps the
parameters in 16 bits and fp32 master weights in its optimizer for both the -mixed and the -true spellings."""

FLOAT16_PRECISIONS: Final = frozenset({"16-mixed", "16-true"})

DEFAULTS: Final[dict[str, Any]] = {
    # A torch optimizer (SGD, Adam) is what Lite users pass; DeepSpeed tests only its own with ZeRO.
    "zero_allow_untested_optimizer": True,
    # DeepSpeed requires a batch size, and uses it only for its throughput logs and batch-size checks.
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 2**31 - 1,
}


def _stage(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value not in STAGES:
        raise ConfigurationError(
            f"DeepSpeedStrategy(stage={value!r}) is not a ZeRO stage; expected one of {list(STAGES)} "
            f"(1 shards optimizer states, 2 also gradients, 3 also parameters). Without sharding use strategy='ddp'."
        )


@attrs.frozen
class ZeroSettings:
    """The strategy's keywords, checked together."""

    stage: int = attrs.field(default=2, validator=_stage)
    offload_optimizer: bool = False
    offload_parameters: bool = False
    gradient_clipping: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.offload_parameters and self.stage != 3:
            raise ConfigurationError(
                f"DeepSpeedStrategy(offload_parameters=True) needs stage=3 (only ZeRO-3 shards parameters), got "
                f"stage={self.stage}; use strategy='deepspeed_stage_3_offload' or offload_optimizer=True alone."
            )
        if self.gradient_clipping is not None and not self.gradient_clipping > 0:
            raise ConfigurationError(
                f"DeepSpeedStrategy(gradient_clipping={self.gradient_clipping!r}) must be a positive norm or None."
            )

    def as_config(self) -> dict[str, Any]:
        zero: dict[str, Any] = {"stage": self.stage}
        config: dict[str, Any] = {"zero_optimization": zero}
        if self.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
            # A torch optimizer over offloaded states works; DeepSpeed's own CPUAdam would need a compiled op.
            config["zero_force_ds_cpu_optimizer"] = False
        if self.offload_parameters:
            zero["offload_param"] = {"device": "cpu", "pin_memory": False}
        if self.gradient_clipping is not None:
            config["gradient_clipping"] = float(self.gradient_clipping)
        return config


def read_config(config: Mapping[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any]:
    """The user's ``config=``: a mapping (copied) or the path of a JSON file; ``{}`` for ``None``."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigurationError(
            f"DeepSpeedStrategy(config={config!r}) must be a dict or the path of a DeepSpeed JSON config file."
        )
    path = Path(config)
    try:
        loaded = json.loads(path.read_text())
    except OSError as error:
        raise ConfigurationError(f"DeepSpeedStrategy(config={str(path)!r}) cannot be read: {error}.") from error
    except json.JSONDecodeError as error:
        raise ConfigurationError(
            f"DeepSpeedStrategy(config={str(path)!r}) is not valid JSON: {error}. DeepSpeed configs are JSON objects."
        ) from error
    if not isinstance(loaded, dict):
        raise ConfigurationError(
            f"DeepSpeedStrategy(config={str(path)!r}) holds a {type(loaded).__name__}; expected a JSON object."
        )
    return loaded


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` on top; sections present in both are merged recursively."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _enabled(config: Mapping[str, Any], section: str) -> bool:
    value = config.get(section)
    return isinstance(value, Mapping) and bool(value.get("enabled", False))


def _check_precision(config: Mapping[str, Any], precision: str, strategy: str) -> None:
    wanted = {name for name in ("fp16", "bf16") if name in PRECISION_SECTIONS[precision]}
    enabled = {name for name in ("fp16", "bf16") if _enabled(config, name)}
    if enabled != wanted:
        raise ConfigurationError(
            f"The strategy {strategy!r} was given a config that enables {sorted(enabled) or 'no 16-bit mode'}, but "
            f"the run's precision is {precision!r}, which DeepSpeed runs as {sorted(wanted) or 'float32'}. Choose the "
            f"precision with Lite(precision=...) and leave 'fp16' / 'bf16' 'enabled' out of config=."
        )


def _check_zero(config: Mapping[str, Any], strategy: str) -> None:
    zero = config.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, Mapping) else None
    if stage not in STAGES:
        raise ConfigurationError(
            f"The strategy {strategy!r} has zero_optimization.stage={stage!r} after merging config=; expected one of "
            f"{list(STAGES)}."
        )
    if isinstance(zero, Mapping) and zero.get("offload_param") and stage != 3:
        raise ConfigurationError(
            f"The strategy {strategy!r} offloads parameters (zero_optimization.offload_param) at stage {stage}; "
            f"only stage 3 shards parameters."
        )


def build_config(
    settings: ZeroSettings, user_config: Mapping[str, Any], precision: str, strategy: str
) -> dict[str, Any]:
    """The complete DeepSpeed config of a run; see the module docstring for the order of precedence."""
    section = PRECISION_SECTIONS.get(precision)
    if section is None:
        raise ConfigurationError(
            f"The strategy {strategy!r} cannot run precision={precision!r}; DeepSpeed runs "
            f"{sorted(PRECISION_SECTIONS)}."
        )
    config = merged(merged(merged(DEFAULTS, settings.as_config()), section), user_config)
    _check_zero(config, strategy)
    _check_precision(config, precision, strategy)
    return config


def zero_stage(config: Mapping[str, Any]) -> int:
    stage: int = config["zero_optimization"]["stage"]
    return stage


LIGHTNING_KEYWORDS: Final[dict[str, tuple[str, ...]]] = {
    "sub_group_size": ("zero_optimization", "sub_group_size"),
    "contiguous_gradients": ("zero_optimization", "contiguous_gradients"),
    "overlap_comm": ("zero_optimization", "overlap_comm"),
    "allgather_partitions": ("zero_optimization", "allgather_partitions"),
    "reduce_scatter": ("zero_optimization", "reduce_scatter"),
    "allgather_bucket_size": ("zero_optimization", "allgather_bucket_size"),
    "reduce_bucket_size": ("zero_optimization", "reduce_bucket_size"),
    "offload_params_device": ("zero_optimization", "offload_param", "device"),
    "nvme_path": ("zero_optimization", "offload_param", "nvme_path"),
    "params_buffer_count": ("zero_optimization", "offload_param", "buffer_count"),
    "params_buffer_size": ("zero_optimization", "offload_param", "buffer_size"),
    "max_in_cpu": ("zero_optimization", "offload_param", "max_in_cpu"),
    "pin_memory": ("zero_optimization", "offload_param", "pin_memory"),
    "offload_optimizer_device": ("zero_optimization", "offload_optimizer", "device"),
    "optimizer_buffer_count": ("zero_optimization", "offload_optimizer", "buffer_count"),
    "block_size": ("aio", "block_size"),
    "queue_depth": ("aio", "queue_depth"),
    "single_submit": ("aio", "single_submit"),
    "overlap_events": ("aio", "overlap_events"),
    "thread_count": ("aio", "thread_count"),
    "zero_allow_untested_optimizer": ("zero_allow_untested_optimizer",),
    "logging_batch_size_per_gpu": ("train_micro_batch_size_per_gpu",),
    "loss_scale": ("fp16", "loss_scale"),
    "initial_scale_power": ("fp16", "initial_scale_power"),
    "loss_scale_window": ("fp16", "loss_scale_window"),
    "hysteresis": ("fp16", "hysteresis"),
    "min_loss_scale": ("fp16", "min_loss_scale"),
    "partition_activations": ("activation_checkpointing", "partition_activations"),
    "cpu_checkpointing": ("activation_checkpointing", "cpu_checkpointing"),
    "contiguous_memory_optimization": ("activation_checkpointing", "contiguous_memory_optimization"),
    "synchronize_checkpoint_boundary": ("activation_checkpointing", "synchronize_checkpoint_boundary"),
}
"""Lightning's ``DeepSpeedStrategy`` keywords that are one entry of DeepSpeed's config: name -> the entry's path.
Given to ``DeepSpeedStrategy(...)`` they become that entry, under what ``config=`` says (an explicit config wins).
The ``activation_checkpointing`` entries configure ``deepspeed.checkpointing`` for models that call it themselves;
``activation_checkpointing_policy`` is what checkpoints a model's modules without changing it."""


def keyword_config(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The config section that Lightning's keywords (:data:`LIGHTNING_KEYWORDS`) stand for."""
    config: dict[str, Any] = {}
    for name, value in keywords.items():
        *sections, key = LIGHTNING_KEYWORDS[name]
        place = config
        for section in sections:
            place = place.setdefault(section, {})
        place[key] = value
    return config
