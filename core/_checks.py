"""Checks of whole numbers: arguments and the text of environment variables.

Public through :mod:`core.toolkit` (``is_whole``, ``check_whole``, ``read_whole``), so that every plugin refuses a
bad count with the same words instead of writing the ``int, not bool, >= n`` test again.
"""

from __future__ import annotations

import re
from typing import Final, TypeGuard

from core._errors import ConfigurationError

# What a launcher writes into a variable: decimal digits, perhaps with spaces around them. Python's int() takes
# more ("+3", "-1", "1_000", "٣"), none of which a launcher ever sets, so none of them is taken for a count.
_DIGITS: Final = re.compile(r"[0-9]+")


def is_whole(value: object, minimum: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` that is not a ``bool`` (``True`` is an int to Python, never a count to us),
    and at least ``minimum`` when one is given."""
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)


def check_whole(owner: str, name: str, value: object, minimum: int = 1) -> int:
    """``value`` if it is a whole number of at least ``minimum`` (see :func:`is_whole`), else a
    :class:`core.ConfigurationError` that names the argument as the user wrote it: ``owner(name=value)``.

    ``check_whole("MyStrategy", "buckets", 0)`` raises ``MyStrategy(buckets=0): expected a whole number >= 1.``
    """
    if is_whole(value, minimum):
        return value
    detail = " (True and False are not numbers here)" if isinstance(value, bool) else ""
    raise ConfigurationError(f"{owner}({name}={value!r}): expected a whole number >= {minimum}{detail}.")


def read_whole(name: str, raw: str, *, minimum: int = 0, source: str = "environment", hint: str = "") -> int:
    """The whole number that a launcher wrote into the environment variable ``name`` as the text ``raw``.

    Decimal digits with optional surrounding spaces are accepted; anything else (an empty string, a sign, a
    fraction, underscores, words) or a number below ``minimum`` raises a :class:`core.ConfigurationError`:
    ``The {source} variable NAME='raw' is not a whole number >= minimum; {hint}``. ``source`` says who sets the
    variable (``"SLURM"``, ``"torchrun"``) and ``hint`` how to fix it (``"SLURM sets it to one: run under srun."``).
    What to do when the variable is unset is the caller's choice: read it with ``os.environ.get`` first.
    """
    text = raw.strip()
    if _DIGITS.fullmatch(text) and int(text) >= minimum:
        return int(text)
    words = f"The {source} variable {name}={raw!r} is not a whole number" + (f" >= {minimum}" if minimum > 0 else "")
    raise ConfigurationError(f"{words}; {hint}" if hint else f"{words}.")
