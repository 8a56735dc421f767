"""torchft, imported only when a run needs it (:class:`core.toolkit.OptionalEngine` says why it cannot be used)."""

from __future__ import annotations

from types import ModuleType
from typing import Final

from core.toolkit import OptionalEngine

INSTALL: Final = "pip install 'torchft>=0.2'"
"""The command that installs the engine (``pip install core-torchft`` installs it as a dependency)."""


def _missing_names(torchft: ModuleType) -> str | None:
    missing = [name for name in ("Manager", "DistributedDataParallel", "Optimizer", "ProcessGroupGloo")
               if not hasattr(torchft, name)]
    return f"this torchft lacks {missing}, which core-torchft needs; upgrade it: {INSTALL}" if missing else None


TORCHFT: Final = OptionalEngine("torchft", title="torchft", install=INSTALL, used_by="strategy='torchft_ddp'",
                                plugin="core-torchft", check=_missing_names)

unavailable_reason = TORCHFT.unavailable_reason
load = TORCHFT.load
submodule = TORCHFT.submodule  # torchft ships no type information: its submodules are imported by name, untyped
