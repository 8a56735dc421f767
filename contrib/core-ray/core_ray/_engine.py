"""Ray, imported only when a run needs it (:class:`core.toolkit.OptionalEngine` says why it cannot be used)."""

from __future__ import annotations

from typing import Final

from core.toolkit import OptionalEngine

INSTALL: Final = "pip install 'ray>=2.9'"
"""The command that installs the engine (``pip install core-ray`` installs it as a dependency)."""

# 2.9: placement groups and ``ray.util.get_node_ip_address`` as this plugin uses them.
RAY: Final = OptionalEngine("ray", title="Ray", install=INSTALL, used_by="plugins=['ray']", plugin="core-ray",
                            minimum="2.9")

unavailable_reason = RAY.unavailable_reason
load = RAY.load
