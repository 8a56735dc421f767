"""What a Lightning name stands for in ``core.lightning``'s tables: a :class:`Target` or an :class:`Unsupported`.

The records alone, below everything that reads the tables (``_names`` answers names from them, ``_tables`` and
``_tree_map`` hold them), so that none of those modules imports another back.
"""

from __future__ import annotations

import attrs

__all__ = ["Entry", "Target", "Unsupported"]


@attrs.frozen
class Target:
    """Where the object for a Lightning name lives: ``module`` and ``attribute``.

    :param distribution: The distribution to ``pip install`` when ``module`` is a plugin's package.
    """

    module: str
    attribute: str
    distribution: str = "core"


@attrs.frozen
class Unsupported:
    """A Lightning name with no counterpart here: ``why`` there is none and ``instead``, what to do."""

    why: str
    instead: str


Entry = Target | Unsupported
