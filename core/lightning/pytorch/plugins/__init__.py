"""``lightning.pytorch.plugins``: precision and checkpoint plugins are aliases here (``precision="bf16-mixed"``)."""

from __future__ import annotations

from core.lightning._names import namespace_getattr
from core.lightning._tables import PLUGINS

__getattr__ = namespace_getattr(__name__, PLUGINS, submodules=("environments",))
