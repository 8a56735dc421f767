"""An outside engine a plugin drives (Ray, Horovod, torchft, hivemind): imported only when a run needs it, and when
it cannot be used, one sentence saying why and the command that fixes it."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from packaging.version import InvalidVersion, Version

from core._errors import PluginUnavailableError


class OptionalEngine:
    """A third-party library a plugin imports lazily, with the reason it is unusable here.

    ``unavailable_reason()`` (what a plugin's own ``unavailable_reason`` trait returns) imports the library once and
    answers ``None`` or one sentence ending with the fix; ``load()`` returns the module or raises
    :class:`core.PluginUnavailableError` naming the selection that needed it (``used_by``, e.g.
    ``"plugins=['ray']"``); ``submodule(name)`` imports ``<module>.<name>`` after the same check.

    :param module: The module to import (``"ray"``, ``"horovod.torch"``).
    :param title: The engine's name in messages (``"Ray"``).
    :param install: The command that installs or repairs it.
    :param used_by: The user's selection, as they typed it, for ``load``'s error.
    :param plugin: The plugin's distribution in messages (``"core-ray"``).
    :param minimum: The oldest version the plugin works with (read from the module's ``__version__``); a version
        that does not parse (a development build) is let through.
    :param platforms: ``sys.platform`` prefixes the engine runs on, or ``None`` for any; ``platform_reason`` says why
        (``"its wheel ships the p2pd daemon for Linux only"``).
    :param check: A further check of the imported module, returning a problem sentence or ``None``.
    """

    def __init__(
        self,
        module: str,
        *,
        title: str,
        install: str,
        used_by: str,
        plugin: str = "this plugin",
        minimum: str | None = None,
        platforms: tuple[str, ...] | None = None,
        platform_reason: str = "",
        check: Callable[[ModuleType], str | None] | None = None,
    ) -> None:
        self.module = module
        self.title = title
        self.install = install
        self.used_by = used_by
        self.plugin = plugin
        self.platform_reason = platform_reason
        self.minimum = Version(minimum) if minimum is not None else None
        self.platforms = platforms
        self.check = check
        self._reason: tuple[str | None] | None = None  # the answer, once asked: importing twice costs seconds

    def __repr__(self) -> str:
        return f"OptionalEngine({self.module!r}, used_by={self.used_by!r})"

    def unavailable_reason(self) -> str | None:
        """Why the engine cannot be used here, or ``None`` when it can (asked once per process)."""
        if self._reason is None:
            self._reason = (self._find_reason(),)
        return self._reason[0]

    def _find_reason(self) -> str | None:
        if self.platforms is not None and not sys.platform.startswith(self.platforms):
            why = f" ({self.platform_reason})" if self.platform_reason else ""
            return f"{self.title} runs on {' or '.join(self.platforms)} only{why}, and this is {sys.platform!r}"
        try:
            imported = importlib.import_module(self.module)
        except ImportError as error:
            return f"{self.title} is not importable ({type(error).__name__}: {error}); install it: {self.install}"
        if self.minimum is not None:
            found = str(getattr(imported, "__version__", "0"))
            try:
                too_old = Version(found) < self.minimum
            except InvalidVersion:
                too_old = False  # a development build: let it try
            if too_old:
                return (f"{self.title} {found} is older than {self.minimum}, which {self.plugin} needs; upgrade it: "
                        f"{self.install}")
        return self.check(imported) if self.check is not None else None

    def load(self) -> ModuleType:
        """The engine's module; raises :class:`core.PluginUnavailableError` naming the fix when it is unusable."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise PluginUnavailableError(f"{self.used_by} cannot run: {reason}")
        return importlib.import_module(self.module)

    def submodule(self, name: str) -> ModuleType:
        """``<module>.<name>``, after the same check as :meth:`load` (for engines that ship no type information)."""
        self.load()
        return importlib.import_module(f"{self.module}.{name}")


def require_accelerator(alias: str, distribution: str, reason: str | None) -> None:
    """Raise :class:`core.PluginUnavailableError` when an accelerator cannot run here; return when it can.

    What an accelerator plugin calls before it touches its devices: the message names the alias, its distribution
    and the reason, and points to ``accelerator='cpu'``, ``'auto'`` and ``python -m core.plugins --check``.

    :param alias: The accelerator's alias (``"cuda"``).
    :param distribution: The distribution it comes from (``"core-cuda"``).
    :param reason: The plugin's ``unavailable_reason()``: ``None`` when it can run, else one sentence saying why.
    """
    if reason is not None:
        raise PluginUnavailableError(
            f"The accelerator {alias!r} ({distribution}) is installed but cannot run here: {reason}. Use "
            f"accelerator='cpu', or accelerator='auto' to take the best one available; "
            f"python -m core.plugins --check shows what is usable."
        )


@contextmanager
def quieted(logger: str | logging.Logger, level: int = logging.ERROR) -> Iterator[None]:
    """Raise a library's logger to ``level`` for the duration of the block, then restore its own level.

    For messages an engine logs that are expected where a plugin calls it (torchao's warning for each CUDA kernel
    library it cannot load on a CPU machine; DTensor's note that a two-dimensional gather redistributes twice), so
    the user's log keeps what is news to them.

    :param logger: The logger or its name (``"torchao"``).
    :param level: The lowest level still shown inside the block.
    """
    target = logging.getLogger(logger) if isinstance(logger, str) else logger
    previous = target.level
    target.setLevel(level)
    try:
        yield
    finally:
        target.setLevel(previous)
