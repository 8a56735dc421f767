"""hivemind, imported only when a run needs it (:class:`core.toolkit.OptionalEngine` says why it cannot be used)."""

from __future__ import annotations

from typing import Final

from core.toolkit import OptionalEngine

INSTALL: Final = "pip install 'hivemind>=1.1.12'"
"""The command that installs hivemind (its Linux wheel bundles the p2pd daemon)."""

HIVEMIND: Final = OptionalEngine("hivemind", title="hivemind", install=INSTALL, used_by="strategy='hivemind'",
                                 plugin="core-hivemind", platforms=("linux",),
                                 platform_reason="its wheel ships the p2pd daemon for Linux only")

unavailable_reason = HIVEMIND.unavailable_reason
load = HIVEMIND.load
