"""``import core.lightning as L``: Lightning 2.x's names over core, so a script moves by changing one import.

``L.Fabric`` is :class:`core.Lite`, ``L.LightningModule`` is :class:`core.Module`, ``L.Trainer`` is
:class:`core.Trainer`, and ``L.pytorch.callbacks``, ``L.pytorch.loggers``, ``L.fabric.strategies`` (and the
same under ``L.pytorch``) hold the classes that play the parts of Lightning's. Strategy classes come from
their plugin distributions and are imported only when touched. A Lightning name that core does not provide
raises :class:`UnsupportedLightningName` saying what to use instead; docs/migrating-from-lightning.md lists
every name. ``core.lightning.install_alias()`` (or ``pip install core-lightning-alias``) makes ``import lightning``
itself answer with this package, so a Lightning program runs unmodified. Every module path of Lightning 2.6
imports under ``core.lightning`` (or refuses the import with that error): see core/lightning/_finder.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from core import __version__ as __version__  # Lightning's __version__: the version of core answering it
from core.lightning import _finder
from core.lightning._alias import install_alias
from core.lightning._logging import configure_core_logger
from core.lightning._names import Target, UnsupportedLightningName, namespace_getattr

if TYPE_CHECKING:
    from core.callbacks import Callback
    from core.lite import Lite as Fabric
    from core.lite import seed_everything
    from core.module import DataModule as LightningDataModule
    from core.module import Module as LightningModule
    from core.trainer import Trainer

TOP_LEVEL: Final = {
    "Fabric": Target("core.lite", "Lite"),
    "LightningModule": Target("core.module", "Module"),
    "LightningDataModule": Target("core.module", "DataModule"),
    "Trainer": Target("core.lightning._trainer", "Trainer"),  # Lightning's logger and layout
    "Callback": Target("core.callbacks", "Callback"),
    "seed_everything": Target("core.lightning._compat", "seed_everything"),
}
"""``lightning``'s own ``__all__`` (without ``__version__``), and where each name lives here."""

__getattr__ = namespace_getattr(__name__, TOP_LEVEL, submodules=("fabric", "pytorch"))

# Lightning prints its INFO lines ("Seed set to 42"); so do programs written for it (core/lightning/_logging.py).
configure_core_logger()

# Every other module path of Lightning 2.6 (core.lightning.pytorch.utilities.model_helpers, ...) comes from
# the finder over the checked-in table of Lightning's tree (core/lightning/_tree.py).
_finder.install()

__all__ = [
    "Callback",
    "Fabric",
    "LightningDataModule",
    "LightningModule",
    "Trainer",
    "UnsupportedLightningName",
    "install_alias",
    "seed_everything",
]
