"""The project's error and warning types.

One base error, a few subclasses. Every message names the value at fault, what was expected, what is
installed and the command that fixes it, so that a user never has to read a traceback from inside torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "BrokenPluginError",
    "CheckpointError",
    "ConfigurationError",
    "CoreDeprecationWarning",
    "CoreError",
    "CoreWarning",
    "IncompatiblePluginError",
    "PluginConflictError",
    "PluginDisabledError",
    "PluginUnavailableError",
    "UnknownPluginError",
]


def _rebuilt(cls: type[CoreError], args: tuple[object, ...], state: dict[str, object]) -> CoreError:
    """An error as :meth:`CoreError.__reduce__` saved it, without calling its ``__init__`` again."""
    builtin_bases: list[Any] = [base for base in cls.__mro__ if base.__module__ == "builtins"]
    for base in builtin_bases:  # the builtin base whose layout it has (OSError's, for a TimeoutError subclass)
        try:
            error: CoreError = base.__new__(cls)
            break
        except TypeError:  # "RuntimeError.__new__(X) is not safe": another base lays it out
            continue
    else:  # pragma: no cover - every exception class has a builtin base that creates it
        raise TypeError(f"cannot unpickle {cls.__qualname__}")
    error.args = args
    error.__dict__.update(state)
    return error


class CoreError(Exception):
    """Base class of every error raised by `core` and its plugins."""

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross processes (a rank's failure, a spawned run's outcome). Exception's own pickling calls
        # ``cls(*args)``, which a subclass whose ``__init__`` builds the message from its parts cannot take back.
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


class ConfigurationError(CoreError, ValueError):
    """A setting, or a combination of settings, that cannot work (``devices=0``, 16-bit with ``dp``)."""


class UnknownPluginError(CoreError, LookupError):
    """An alias that no installed distribution provides for that kind."""

    def __init__(
        self,
        kind: str,
        alias: str,
        installed: Iterable[str],
        provider: str | None = None,
        installable: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.alias = alias
        self.installed = sorted(installed)
        self.provider = provider
        lines = [f"Unknown {kind} {alias!r}."]
        if provider is not None:  # the fix, first: a known alias whose distribution is not installed
            lines.append(f"{alias!r} is provided by {provider}: pip install {provider}.")
        close = difflib.get_close_matches(alias, self.installed, n=3, cutoff=0.6)
        if close:
            lines.append("Did you mean " + " or ".join(repr(c) for c in close) + "?")
        lines.append(f"Installed {kind} aliases: " + (", ".join(self.installed) or "none") + ".")
        if provider is None and not close:
            # Not installed, but perhaps a typo of an alias that a first-party distribution provides.
            others = installable or {}
            matches = difflib.get_close_matches(alias, sorted(others), n=2, cutoff=0.6)
            if matches:
                lines.append(
                    "Did you mean "
                    + " or ".join(f"{match!r} (pip install {others[match]})" for match in matches)
                    + "?"
                )
            lines.append("List what is installed with: python -m core.plugins")
        super().__init__(" ".join(lines))


class PluginConflictError(CoreError):
    """Two distributions claim the same alias of the same kind."""

    def __init__(self, kind: str, alias: str, distributions: Iterable[str]) -> None:
        self.kind = kind
        self.alias = alias
        self.distributions = sorted(distributions)
        pins = " or ".join(f"{kind}={f'{dist}:{alias}'!r}" for dist in self.distributions)
        super().__init__(
            f"The {kind} alias {alias!r} is provided by more than one distribution: "
            f"{', '.join(self.distributions)}. Pin one, for example {pins}, "
            f"or block one with CORE_DISABLE_PLUGINS=<distribution>."
        )


class IncompatiblePluginError(CoreError):
    """A plugin whose ``Requires-Dist`` on ``core`` the installed core does not satisfy."""


class PluginDisabledError(CoreError):
    """A plugin blocked by ``CORE_DISABLE_PLUGINS`` or ``CORE_PLUGINS_AUTOLOAD=0``."""


class BrokenPluginError(CoreError):
    """A plugin that failed to import, to construct, to register, or raised inside a hook."""


class PluginUnavailableError(CoreError):
    """A plugin that loads but cannot run on this machine (no CUDA device, ``torch_xla`` missing)."""


class CheckpointError(CoreError):
    """A checkpoint that cannot be written or read: missing, truncated, or refused as unsafe."""


class CoreWarning(UserWarning):
    """Base class of every warning emitted by `core` and its plugins."""


class CoreDeprecationWarning(CoreWarning, DeprecationWarning):
    """A spelling or option that still works but will be removed."""
