"""The arguments of Lightning 2.6's strategy classes whose names core's strategies answer to (data, not code).

``L.fabric.strategies.FSDPStrategy`` is ``core_fsdp.FSDPStrategy`` (``_tables.py``), so a Lightning program passes
it Lightning's arguments. Each must be taken (mapped to its meaning here) or refused by name with a
:class:`core.ConfigurationError` saying why and what to write instead, never a bare ``TypeError``:
``tests/test_lightning_strategy_arguments.py`` walks this table, and checks it against Lightning's own signatures
where Lightning's source is at hand. ``EXAMPLES`` holds a value per name (Lightning's default where it is not
``None``) for that walk; ``FORWARDED`` the keyword arguments Lightning's ``**kwargs`` pass on to the torch object.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

_RUN: Final = ("accelerator", "parallel_devices", "cluster_environment")

STRATEGY_ARGUMENTS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    # Lightning's class path: (core's class as "module:Class", the names its __init__ takes)
    "lightning.fabric.strategies.FSDPStrategy": ("core_fsdp:FSDPStrategy", (
        *_RUN, "precision", "process_group_backend", "timeout", "cpu_offload", "mixed_precision", "auto_wrap_policy",
        "activation_checkpointing", "activation_checkpointing_policy", "sharding_strategy", "state_dict_type",
        "device_mesh",
    )),
    "lightning.pytorch.strategies.FSDPStrategy": ("core_fsdp:FSDPStrategy", (
        *_RUN, "checkpoint_io", "precision_plugin", "process_group_backend", "timeout", "cpu_offload",
        "mixed_precision", "auto_wrap_policy", "activation_checkpointing", "activation_checkpointing_policy",
        "sharding_strategy", "state_dict_type", "device_mesh",
    )),
    "lightning.fabric.strategies.DDPStrategy": ("core_ddp:DDPStrategy", (
        *_RUN, "checkpoint_io", "precision", "process_group_backend", "timeout", "start_method",
    )),
    "lightning.pytorch.strategies.DDPStrategy": ("core_ddp:DDPStrategy", (
        *_RUN, "checkpoint_io", "precision_plugin", "ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper",
        "model_averaging_period", "process_group_backend", "timeout", "start_method",
    )),
    "lightning.fabric.strategies.ModelParallelStrategy": ("core_model_parallel:ModelParallelStrategy", (
        "parallelize_fn", "data_parallel_size", "tensor_parallel_size", "save_distributed_checkpoint",
        "process_group_backend", "timeout",
    )),
    "lightning.pytorch.strategies.ModelParallelStrategy": ("core_model_parallel:ModelParallelStrategy", (
        "data_parallel_size", "tensor_parallel_size", "save_distributed_checkpoint", "process_group_backend",
        "timeout",
    )),
}

_DEEPSPEED: Final = (
    "accelerator", "zero_optimization", "stage", "remote_device", "offload_optimizer", "offload_parameters",
    "offload_params_device", "nvme_path", "params_buffer_count", "params_buffer_size", "max_in_cpu",
    "offload_optimizer_device", "optimizer_buffer_count", "block_size", "queue_depth", "single_submit",
    "overlap_events", "thread_count", "pin_memory", "sub_group_size", "contiguous_gradients", "overlap_comm",
    "allgather_partitions", "reduce_scatter", "allgather_bucket_size", "reduce_bucket_size",
    "zero_allow_untested_optimizer", "logging_batch_size_per_gpu", "config", "logging_level", "parallel_devices",
    "cluster_environment", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
    "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
    "synchronize_checkpoint_boundary", "load_full_weights",
)
STRATEGY_ARGUMENTS["lightning.fabric.strategies.DeepSpeedStrategy"] = ("core_deepspeed:DeepSpeedStrategy", (
    *_DEEPSPEED, "precision", "process_group_backend", "timeout", "exclude_frozen_parameters",
))
STRATEGY_ARGUMENTS["lightning.pytorch.strategies.DeepSpeedStrategy"] = ("core_deepspeed:DeepSpeedStrategy", (
    *_DEEPSPEED, "precision_plugin", "process_group_backend", "timeout", "exclude_frozen_parameters",
))

FORWARDED: Final[dict[str, tuple[str, ...]]] = {
    # Lightning passes its **kwargs on: FSDP1's FullyShardedDataParallel, torch's DistributedDataParallel.
    "core_fsdp:FSDPStrategy": (
        "limit_all_gathers", "use_orig_params", "forward_prefetch", "backward_prefetch", "sync_module_states",
        "param_init_fn", "device_id", "ignored_modules", "ignored_states", "process_group",
    ),
    "core_ddp:DDPStrategy": (
        "find_unused_parameters", "static_graph", "gradient_as_bucket_view", "bucket_cap_mb", "broadcast_buffers",
        "init_sync", "check_reduction", "device_ids", "output_device", "process_group",
    ),
}

EXAMPLES: Final[dict[str, Any]] = {
    "timeout": timedelta(minutes=30),
    "start_method": "popen",
    "sharding_strategy": "FULL_SHARD",
    "state_dict_type": "sharded",
    "data_parallel_size": "auto",
    "tensor_parallel_size": "auto",
    "save_distributed_checkpoint": True,
    "zero_optimization": True,
    "stage": 2,
    "offload_optimizer": False,
    "offload_parameters": False,
    "offload_params_device": "cpu",
    "nvme_path": "/local_nvme",
    "params_buffer_count": 5,
    "params_buffer_size": 100_000_000,
    "max_in_cpu": 1_000_000_000,
    "offload_optimizer_device": "cpu",
    "optimizer_buffer_count": 4,
    "block_size": 1_048_576,
    "queue_depth": 8,
    "single_submit": False,
    "overlap_events": True,
    "thread_count": 1,
    "pin_memory": False,
    "sub_group_size": 1_000_000_000_000,
    "contiguous_gradients": True,
    "overlap_comm": True,
    "allgather_partitions": True,
    "reduce_scatter": True,
    "allgather_bucket_size": 200_000_000,
    "reduce_bucket_size": 200_000_000,
    "zero_allow_untested_optimizer": True,
    "logging_level": 30,
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1,
    "partition_activations": False,
    "cpu_checkpointing": False,
    "contiguous_memory_optimization": False,
    "synchronize_checkpoint_boundary": False,
    "load_full_weights": False,
    "exclude_frozen_parameters": False,
    "limit_all_gathers": True,
    "use_orig_params": True,
    "forward_prefetch": False,
    "sync_module_states": False,
    "find_unused_parameters": False,
    "static_graph": False,
    "gradient_as_bucket_view": False,
    "broadcast_buffers": True,
    "init_sync": True,
    "check_reduction": False,
}
"""A value for each name the walk passes (Lightning's default); a name not here is passed ``None``."""

TAKEN: Final[dict[str, tuple[str, ...]]] = {
    # Names each class takes with a meaning (or a one-time note), never refuses: the walk checks these construct.
    "core_fsdp:FSDPStrategy": (
        "process_group_backend", "timeout", "cpu_offload", "mixed_precision", "auto_wrap_policy",
        "activation_checkpointing", "activation_checkpointing_policy", "sharding_strategy", "state_dict_type",
        "device_mesh", "limit_all_gathers", "use_orig_params", "forward_prefetch", "backward_prefetch",
        "sync_module_states",
    ),
    "core_ddp:DDPStrategy": (
        "process_group_backend", "timeout", "start_method", "find_unused_parameters", "static_graph",
        "gradient_as_bucket_view", "bucket_cap_mb", "broadcast_buffers", "init_sync", "check_reduction",
    ),
    "core_deepspeed:DeepSpeedStrategy": (
        "stage", "offload_optimizer", "offload_parameters", "config", "process_group_backend", "timeout",
        "overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "contiguous_gradients", "sub_group_size",
        "loss_scale", "initial_scale_power", "partition_activations", "cpu_checkpointing",
    ),
    "core_model_parallel:ModelParallelStrategy": (
        "parallelize_fn", "data_parallel_size", "tensor_parallel_size", "save_distributed_checkpoint",
        "process_group_backend", "timeout",
    ),
}
