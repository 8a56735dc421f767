"""``lightning.pytorch``: the Trainer, LightningModule and callbacks over core's."""

from __future__ import annotations

from typing import Final

from core import __version__ as __version__  # Lightning's __version__: the version of core answering it
from core.lightning._names import Target, namespace_getattr

PYTORCH: Final = {
    "Trainer": Target("core.lightning._trainer", "Trainer"),
    "LightningModule": Target("core.module", "Module"),
    "LightningDataModule": Target("core.module", "DataModule"),
    "Callback": Target("core.callbacks", "Callback"),
    "seed_everything": Target("core.lightning._compat", "seed_everything"),
}

__getattr__ = namespace_getattr(
    __name__,
    PYTORCH,
    submodules=("accelerators", "callbacks", "loggers", "plugins", "profilers", "strategies", "tuner", "utilities"),
)
