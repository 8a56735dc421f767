"""What a Lightning name stands for in ``core.lightning``'s tables: a :class:`Target` or an :class:`Unsupported`.

The records alone, below everything that reads the tables (``_names`` answers names from them, ``_tables`` and
``_tree_map`` hold them), so that none of those modules imports another back.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import attrs

__all__ = ["Entry", "Target", "Unsupported", "public_names"]


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


def public_names(package: str) -> tuple[str, ...]:
    """``package.__all__`` as its ``__init__.py`` writes it, read without importing the package (``core.callbacks``
    imports torch; ``import core.lightning`` must not), so that a table naming all of them is not a second list."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"core.lightning's tables read {package}'s __all__, but {package} is not installed")
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise LookupError(f"{spec.origin} has no literal __all__ for core.lightning's tables to read")
