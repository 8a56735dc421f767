"""Lightning's console logging for programs that import ``core.lightning``.

Lightning gives its loggers a ``StreamHandler`` at INFO when the root logger has none, so ``seed_everything`` prints
``Seed set to 42`` and ``rank_zero_info`` prints its message. core logs the same lines on its ``core`` logger, which
``import core`` leaves unconfigured (a library does not print); ``import core.lightning`` configures it as Lightning
configures ``lightning.fabric``: INFO, a handler to stderr, no propagation, unless the root logger has handlers
(an application's, pytest's), which then receive the records.
"""

from __future__ import annotations

import logging


def configure_core_logger() -> None:
    """Give the ``core`` logger Lightning's console handler (once; see the module docstring)."""
    logger = logging.getLogger("core")
    logger.setLevel(logging.INFO)
    if not logging.getLogger().hasHandlers() and not logger.handlers:
        logger.addHandler(logging.StreamHandler())
        logger.propagate = False
