"""What every conformance class shares: how the plugin under test is named, built and called.

A plugin author subclasses one kit class per plugin and sets either ``alias`` (the entry point users type;
the kit then also checks that the installed distribution declares it properly) or ``plugin_factory`` (a
callable, or ``"module:attribute"``, returning the plugin object; for plugins that are not installed).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, cast

import pytest

from core._errors import CoreError
from core._markers import PROJECT_NAME
from core.hookspecs import CONTRACT_VERSION
from core.plugins._contract import implemented_hooks, inspect_contract
from core.registry._discovery import CORE_DISTRIBUTION, PluginInfo, discover, load
from core.registry._resolver import _manager, _register

_Test = TypeVar("_Test", bound=Callable[..., Any])

# pytest-timeout turns a hang into a failure; without it the job's own timeout still does.
_HAS_TIMEOUT = importlib.util.find_spec("pytest_timeout") is not None


def timeout(seconds: float) -> Callable[[_Test], _Test]:
    """``pytest.mark.timeout(seconds)`` where pytest-timeout is installed, nothing otherwise."""
    if _HAS_TIMEOUT:
        return pytest.mark.timeout(seconds)
    return lambda test: test


def factory_target(factory: Callable[[], object] | str) -> str:
    """The ``"module:attribute"`` a subprocess imports to build the same plugin."""
    if isinstance(factory, str):
        return factory
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        raise CoreError(
            f"plugin_factory={factory!r} cannot be imported by name from another process; define it at module "
            f"level or give it as a 'module:attribute' string."
        )
    return f"{module}:{qualname}"


class Conformance:
    """Base of the kit classes: set ``alias`` or ``plugin_factory`` in a subclass named ``Test...``."""

    kind: ClassVar[str] = ""
    alias: ClassVar[str | None] = None
    """The entry-point alias of the plugin under test (installed plugins)."""
    plugin_factory: ClassVar[Callable[[], object] | str | None] = None
    """Builds the plugin object instead of the entry point: a callable or ``"module:attribute"``."""

    @classmethod
    def _factory(cls) -> Callable[[], object] | str | None:
        """``plugin_factory`` as written in the class body: a function there must not become a method."""
        factory: Any = inspect.getattr_static(cls, "plugin_factory")
        if isinstance(factory, staticmethod):
            factory = factory.__func__
        return cast("Callable[[], object] | str | None", factory)

    @classmethod
    def _require_target(cls) -> None:
        if (cls.alias is None) == (cls._factory() is None):
            pytest.fail(
                f"{cls.__qualname__} must set exactly one of alias = '...' (an installed {cls.kind} plugin) or "
                f"plugin_factory = callable / 'module:attribute'; got alias={cls.alias!r}, "
                f"plugin_factory={cls.plugin_factory!r}.",
                pytrace=False,
            )

    @classmethod
    def entry(cls) -> PluginInfo:
        """The catalog entry of ``alias``; a :class:`core.CoreError` says why it is not usable."""
        assert cls.alias is not None
        return discover().lookup(cls.kind, cls.alias)

    def make_plugin(self) -> object:
        """A fresh plugin object, built as a user's run would build it."""
        self._require_target()
        if self.alias is not None:
            return load(self.entry())
        factory = self._factory()
        if isinstance(factory, str):
            from core.testing._worker import import_factory

            factory = import_factory(factory)
        assert factory is not None
        return factory()

    @classmethod
    def reference(cls) -> str | dict[str, str]:
        """How a job process names the plugin: the alias, or the factory it imports."""
        cls._require_target()
        if cls.alias is not None:
            return cls.alias
        factory = cls._factory()
        assert factory is not None
        return {"factory": factory_target(factory)}

    @pytest.fixture
    def plugin(self) -> object:
        return self.make_plugin()

    @staticmethod
    def call(plugin: object, kind: str, hook: str, **kwargs: Any) -> Any:
        """Call one hook of ``plugin`` through a manager holding only it, as the runtime would."""
        manager = _manager()
        _register(manager, kind, str(getattr(plugin, "name", kind)), plugin)
        return getattr(manager.hook, hook)(**kwargs)

    @staticmethod
    def implements(plugin: object, hook: str) -> bool:
        return hook in implemented_hooks(plugin)

    # ---------------------------------------------------------------------------------------------
    # Every kind
    # ---------------------------------------------------------------------------------------------

    def test_declares_its_kind_and_name(self, plugin: object) -> None:
        assert getattr(plugin, "kind", None) == self.kind, (
            f"{plugin!r} must declare kind = {self.kind!r} (got {getattr(plugin, 'kind', None)!r})"
        )
        name = getattr(plugin, "name", None)
        assert isinstance(name, str) and name, f"{plugin!r} must declare a non-empty string name (got {name!r})"

    def test_registers_against_the_hook_contract(self, plugin: object) -> None:
        manager = _manager()
        _register(manager, self.kind, str(getattr(plugin, "name", self.kind)), plugin)
        assert manager.is_registered(plugin)

    def test_implements_only_current_hooks(self, plugin: object) -> None:
        report = inspect_contract(plugin)
        assert not report.notes(), (
            f"{plugin!r} against hook contract {CONTRACT_VERSION}: " + "; ".join(report.notes())
        )

    def test_distribution_declares_a_core_range(self) -> None:
        if self.alias is None:
            pytest.skip("plugin_factory given: the plugin is not checked as an installed distribution")
        info = self.entry()
        assert info.status == "ok", f"{info.pinned_name}: {info.status} ({info.reason})"
        if info.distribution == CORE_DISTRIBUTION:
            return
        assert info.requires_core, (
            f"{info.distribution} must depend on core with a version range, e.g. dependencies = "
            f'["{PROJECT_NAME}>=0.1,<0.2"], so that an incompatible core refuses it by name'
        )


def caller_python_path() -> list[str]:
    """The ``sys.path`` entries a job needs beyond its own interpreter's (test directories, temporary sites)."""
    prefixes = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return [entry for entry in sys.path if entry and not entry.startswith(prefixes)]


def first_failure(reports: Mapping[int, Mapping[str, Any]], case: str) -> str | None:
    """The traceback of the first rank whose ``case`` raised, if any."""
    for rank in sorted(reports):
        record = reports[rank].get("cases", {}).get(case)
        if record is not None and not record["ok"]:
            return f"global rank {rank}:\n{record['error']}"
    return None
