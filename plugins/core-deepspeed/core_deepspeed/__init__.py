"""core-deepspeed: DeepSpeed ZeRO stages 1-3 and CPU offload as strategies of ``core``.

Each alias is an entry point of the ``core.strategies`` group whose value is one of the factories below (the
names are Lightning's); ``DeepSpeedStrategy(...)`` is the object to pass for options::

    Lite(strategy="deepspeed_stage_3", devices=2)
    Lite(strategy=DeepSpeedStrategy(stage=3, config="ds_config.json"), devices=2)

Importing this package does not import deepspeed; each process of a run imports it when the run starts.
"""

from __future__ import annotations

from ._checkpoint import check_weights_only, load_consolidated, read_tag, save_sharded
from ._config import PRECISION_SECTIONS, ZeroSettings, build_config
from ._strategy import DeepSpeedStrategy


def deepspeed() -> DeepSpeedStrategy:
    """``deepspeed``: ZeRO stage 2, as Lightning's ``deepspeed`` alias."""
    return DeepSpeedStrategy(stage=2, name="deepspeed")


def deepspeed_stage_1() -> DeepSpeedStrategy:
    """``deepspeed_stage_1``: optimizer states sharded across the ranks."""
    return DeepSpeedStrategy(stage=1)


def deepspeed_stage_2() -> DeepSpeedStrategy:
    """``deepspeed_stage_2``: optimizer states and gradients sharded."""
    return DeepSpeedStrategy(stage=2)


def deepspeed_stage_2_offload() -> DeepSpeedStrategy:
    """``deepspeed_stage_2_offload``: stage 2 with optimizer states and the optimizer step on the CPU."""
    return DeepSpeedStrategy(stage=2, offload_optimizer=True)


def deepspeed_stage_3() -> DeepSpeedStrategy:
    """``deepspeed_stage_3``: optimizer states, gradients and parameters sharded."""
    return DeepSpeedStrategy(stage=3)


def deepspeed_stage_3_offload() -> DeepSpeedStrategy:
    """``deepspeed_stage_3_offload``: stage 3 with optimizer states and parameters kept on the CPU."""
    return DeepSpeedStrategy(stage=3, offload_optimizer=True, offload_parameters=True)


__all__ = [
    "PRECISION_SECTIONS",
    "DeepSpeedStrategy",
    "ZeroSettings",
    "build_config",
    "check_weights_only",
    "deepspeed",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_2_offload",
    "deepspeed_stage_3",
    "deepspeed_stage_3_offload",
    "load_consolidated",
    "read_tag",
    "save_sharded",
]
