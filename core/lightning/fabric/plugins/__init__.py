"""``lightning.fabric.plugins``: precision and checkpoint plugins are aliases here (``precision="bf16-mixed"``)."""

from __future__ import annotations

from core.lightning._names import Unsupported, namespace_getattr

_ALIASES = (
    "precision, checkpoint_io and cluster environments are selected by alias (precision='bf16-mixed', "
    "plugins=['slurm', 'async']); python -m core.plugins lists them."
)

__getattr__ = namespace_getattr(
    __name__,
    {
        name: Unsupported("plugins are chosen by alias, not constructed.", _ALIASES)
        for name in (
            "Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision", "BitsandbytesPrecision",
            "TransformerEnginePrecision", "CheckpointIO", "TorchCheckpointIO", "AsyncCheckpointIO",
            "XLACheckpointIO", "ClusterEnvironment",
        )
    },
    submodules=("environments",),
)
