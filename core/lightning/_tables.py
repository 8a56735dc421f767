"""Lightning's names under ``lightning.fabric`` and ``lightning.pytorch``, and their counterparts in core.

One table per Lightning module. Every entry of Lightning's ``__all__`` in that module appears here, either as
a :class:`Target` or as :class:`Unsupported` with the reason, so that the migration guide can list both and a
test can check that each target exists.
"""

from __future__ import annotations

from typing import Final

from core.lightning._entries import Entry, Target, Unsupported, public_names

_PLUGIN_CLASS = (
    "core's strategies are plugins selected by alias; write a class with @core.hookimpl methods "
    "(python -m core.plugins new strategy mine), not a subclass of a Lightning base class."
)

STRATEGIES: Final[dict[str, Entry]] = {
    "DDPStrategy": Target("core_ddp", "DDPStrategy", "core-ddp"),
    "DataParallelStrategy": Target("core_ddp", "DataParallelStrategy", "core-ddp"),
    "FSDPStrategy": Target("core_fsdp", "FSDPStrategy", "core-fsdp"),
    "DeepSpeedStrategy": Target("core_deepspeed", "DeepSpeedStrategy", "core-deepspeed"),
    "ModelParallelStrategy": Target("core_model_parallel", "ModelParallelStrategy", "core-model-parallel"),
    "SingleDeviceStrategy": Target("core.toolkit.strategies", "SingleDeviceStrategy"),
    "XLAStrategy": Target("core_tpu", "XLAStrategy", "core-tpu"),
    "SingleTPUStrategy": Target("core_tpu", "SingleXLAStrategy", "core-tpu"),
    "SingleDeviceXLAStrategy": Target("core_tpu", "SingleXLAStrategy", "core-tpu"),
    # Annotation-only: isinstance() works on core's strategy plugins, subclassing raises the advice (_bases.py).
    "Strategy": Target("core.lightning._bases", "Strategy"),
    "ParallelStrategy": Target("core.lightning._bases", "ParallelStrategy"),
    "XLAFSDPStrategy": Unsupported(
        "FSDP on XLA devices is not implemented by core-tpu.", "strategy='xla' (data parallel on TPUs)."
    ),
}
"""``lightning.fabric.strategies`` and ``lightning.pytorch.strategies``."""

ENVIRONMENTS: Final[dict[str, Entry]] = {
    "LightningEnvironment": Target("core.builtin.environments", "LocalEnvironment"),
    "SLURMEnvironment": Target("core_slurm", "SLURMEnvironment", "core-slurm"),
    "TorchElasticEnvironment": Target("core_torchelastic", "TorchElasticEnvironment", "core-torchelastic"),
    "MPIEnvironment": Target("core_mpi", "MPIEnvironment", "core-mpi"),
    "LSFEnvironment": Target("core_lsf", "LSFEnvironment", "core-lsf"),
    "KubeflowEnvironment": Target("core_kubeflow", "KubeflowEnvironment", "core-kubeflow"),
    "ClusterEnvironment": Target("core.lightning._bases", "ClusterEnvironment"),
    "XLAEnvironment": Unsupported(
        "core-tpu reads the XLA runtime itself.", "accelerator='tpu' (pip install core-tpu)."
    ),
}
"""``lightning.fabric.plugins.environments`` and ``lightning.pytorch.plugins.environments``."""

ACCELERATORS: Final[dict[str, Entry]] = {
    "CPUAccelerator": Target("core.builtin.accelerators", "CPUAccelerator"),
    "CUDAAccelerator": Target("core_cuda", "CUDAAccelerator", "core-cuda"),
    "MPSAccelerator": Target("core_mps", "MPSAccelerator", "core-mps"),
    "XLAAccelerator": Target("core_tpu", "TPUAccelerator", "core-tpu"),
    "Accelerator": Target("core.lightning._bases", "Accelerator"),
}
"""``lightning.fabric.accelerators`` and ``lightning.pytorch.accelerators``."""

_NEW_CALLBACK = "a Callback subclass with the hooks you need (core.callbacks.Callback has Lightning's hook names)."

CALLBACKS: Final[dict[str, Entry]] = {
    **{name: Target("core.callbacks", name) for name in public_names("core.callbacks")},  # every one of core's
    **{
        name: Unsupported(
            "it tunes inside a running fit, and a trial fit cannot start inside one here.",
            f"core.tuner.Tuner(trainer).{method}(model) before trainer.fit(model) (lightning.pytorch.tuner.Tuner).",
        )
        for name, method in (("LearningRateFinder", "lr_find"), ("BatchSizeFinder", "scale_batch_size"))
    },
    "EmailCallback": Unsupported("sending mail is outside a training toolkit's job.", _NEW_CALLBACK),
    "ModelPruning": Unsupported(
        "not implemented.", "torch.nn.utils.prune from a Callback's on_train_epoch_end, or " + _NEW_CALLBACK
    ),
    "SpikeDetection": Unsupported("not implemented.", _NEW_CALLBACK),
}
"""``lightning.pytorch.callbacks``."""

LOGGERS: Final[dict[str, Entry]] = {
    "Logger": Target("core.loggers", "Logger"),
    "CSVLogger": Target("core.lightning._loggers", "CSVLogger"),
    "TensorBoardLogger": Target("core.lightning._loggers", "TensorBoardLogger"),
    "MLFlowLogger": Target("core.loggers", "MLFlowLogger"),
    "WandbLogger": Target("core.loggers", "WandbLogger"),
    "CometLogger": Unsupported("not implemented.", "MLFlowLogger, WandbLogger, or a core.loggers.Logger subclass."),
    "NeptuneLogger": Unsupported("not implemented.", "MLFlowLogger, WandbLogger, or a core.loggers.Logger subclass."),
}
"""``lightning.pytorch.loggers`` (``lightning.fabric.loggers`` holds the CSV and TensorBoard ones)."""

FABRIC_LOGGERS: Final[dict[str, Entry]] = {
    "Logger": Target("core.loggers", "Logger"),
    "CSVLogger": Target("core.lightning._loggers", "FabricCSVLogger"),
    "TensorBoardLogger": Target("core.lightning._loggers", "FabricTensorBoardLogger"),
}
"""``lightning.fabric.loggers``."""

UTILITIES: Final[dict[str, Entry]] = {
    "rank_zero_only": Target("core.lightning._rank_zero", "rank_zero_only"),
    "rank_zero_info": Target("core.lightning._rank_zero", "rank_zero_info"),
    "rank_zero_warn": Target("core.lightning._rank_zero", "rank_zero_warn"),
    "seed_everything": Target("core.lightning._compat", "seed_everything"),
    "Throughput": Target("core.lite", "Throughput"),
    "ThroughputMonitor": Target("core.lite", "ThroughputMonitor"),
    "measure_flops": Target("core.lite", "measure_flops"),
    "get_available_flops": Target("core.lite", "get_available_flops"),
}
"""The commonly imported part of ``lightning.pytorch.utilities`` and ``lightning.fabric.utilities``."""

_ALIASES: Final = (
    "precision, checkpoint_io and cluster environments are selected by alias (precision='bf16-mixed', "
    "plugins=['slurm', 'async']); python -m core.plugins lists them."
)

PLUGINS: Final[dict[str, Entry]] = {
    **{
        name: Unsupported("plugins are chosen by alias, not constructed.", _ALIASES)
        for name in (
            "MixedPrecision", "HalfPrecision", "DoublePrecision", "CheckpointIO", "TorchCheckpointIO",
            "AsyncCheckpointIO", "XLACheckpointIO",
        )
    },
    # Precisions with options beyond an alias: Lightning's class, constructed, is the plugin object.
    "BitsandbytesPrecision": Target("core_bitsandbytes", "BitsandbytesPrecision", "core-bitsandbytes"),
    "TransformerEnginePrecision": Target("core.lightning._precisions", "TransformerEnginePrecision"),
    "ClusterEnvironment": Target("core.lightning._bases", "ClusterEnvironment"),
    "Precision": Target("core.lightning._bases", "Precision"),  # annotations; subclassing says what to do
}
"""``lightning.fabric.plugins`` and ``lightning.pytorch.plugins`` (their ``environments`` submodule aside)."""

PROFILERS: Final[dict[str, Entry]] = {
    **{name: Target("core.profilers", name)
       for name in ("Profiler", "PassThroughProfiler", "SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler")},
    "XLAProfiler": Unsupported("there is no TPU profiling here.", "PyTorchProfiler, or profiler='pytorch'."),
}
"""``lightning.pytorch.profilers``."""

TUNER: Final[dict[str, Entry]] = {"Tuner": Target("core.tuner", "Tuner")}
"""``lightning.pytorch.tuner``."""
