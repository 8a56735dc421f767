"""Discovery of installed plugins from entry-point metadata, without importing any of them.

Everything here reads ``*.dist-info`` metadata only; :func:`load` is the one place that imports plugin
code, and it is called for the plugins a run selects (or, with ``--check``, for all of them).
"""

from __future__ import annotations

import functools
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from core._errors import (
    BrokenPluginError,
    CoreError,
    IncompatiblePluginError,
    PluginConflictError,
    PluginDisabledError,
    PluginUnavailableError,
    UnknownPluginError,
)
from core._records import ENTRY_POINT_GROUPS, KINDS
from core._version import __version__
from core.registry._metadata import EntryPointRecord, canonical_name, entry_points, requirement_on, satisfies

CORE_DISTRIBUTION: Final = "core"

FIRST_PARTY_INDEX: Final = os.path.join(os.path.dirname(__file__), "first_party.json")
"""The alias index of first-party distributions (data, not code: adding a plugin never edits the core)."""


@functools.lru_cache(maxsize=1)
def first_party() -> Mapping[tuple[str, str], str]:
    """``(kind, alias) -> distribution`` for every alias a first-party distribution provides.

    Read from :data:`FIRST_PARTY_INDEX` the first time an unknown alias needs a hint, never on the fast path.
    """
    with open(FIRST_PARTY_INDEX, encoding="utf-8") as index:
        distributions = json.load(index)["distributions"]
    return {
        (kind, alias): distribution
        for distribution, kinds in distributions.items()
        for kind, aliases in kinds.items()
        for alias in aliases
    }


def installable_aliases(kind: str) -> dict[str, str]:
    """First-party aliases of ``kind`` with the distribution to ``pip install`` for each."""
    return {alias: dist for (known_kind, alias), dist in first_party().items() if known_kind == kind}


STATUS_OK: Final = "ok"
STATUS_CONFLICT: Final = "conflict"
STATUS_INCOMPATIBLE: Final = "incompatible"
STATUS_DISABLED: Final = "disabled"
STATUS_EXPLICIT_ONLY: Final = "explicit-only"
STATUS_UNAVAILABLE: Final = "unavailable"
"""A first-party-known alias whose software cannot be installed from the package index (the index's "blocked")."""


@functools.lru_cache(maxsize=1)
def _index_section(name: str) -> Mapping[str, Any]:
    """One top-level section of :data:`FIRST_PARTY_INDEX` ("legacy", "blocked"), without its ``_comment``."""
    with open(FIRST_PARTY_INDEX, encoding="utf-8") as index:
        section = json.load(index).get(name, {})
    return {key: value for key, value in section.items() if key != "_comment"}


def legacy_note(kind: str, alias: str) -> str | None:
    """The note listing shows for a Lightning 1.x alias kept under its old name (``ddp_cpu``, ``tpu_spawn``)."""
    note = _index_section("legacy").get(kind, {}).get(alias)
    return str(note) if note is not None else None


@attrs.frozen
class BlockedAlias:
    """An alias of hardware whose software is not on the package index: what it needs, why, and the hook mapping."""

    kind: str
    alias: str
    device: str
    sdk: str
    needs: str
    why: str
    hooks: str

    def as_info(self) -> PluginInfo:
        return PluginInfo(
            self.kind, self.alias, self.sdk, "-", "", None, STATUS_UNAVAILABLE,
            f"needs the {self.sdk}, which is not on the package index (see docs/ecosystem.md)",
        )

    def message(self) -> str:
        return (
            f"{self.kind}={self.alias!r} is the {self.device}, which needs {self.needs}. It cannot be installed from "
            f"the package index: {self.why}. No core plugin provides it, since none could be tested here; one built "
            f"on that software would map the hooks as follows: {self.hooks}. See docs/ecosystem.md (blockers)."
        )


@functools.lru_cache(maxsize=1)
def blocked_aliases() -> Mapping[tuple[str, str], BlockedAlias]:
    """``(kind, alias) -> BlockedAlias`` for the first-party-known aliases that no distribution can provide."""
    found = {}
    for vendor in _index_section("blocked").values():
        for kind, aliases in vendor["aliases"].items():
            for alias in aliases:
                found[(kind, alias)] = BlockedAlias(
                    kind, alias, vendor["device"], vendor["sdk"], vendor["needs"], vendor["why"], vendor["hooks"]
                )
    return found


def refuse_blocked(alias: str, kind: str | None = None) -> None:
    """Raise :class:`PluginUnavailableError` when ``alias`` (of ``kind``, or of any kind) is a blocked alias."""
    for (blocked_kind, blocked_alias), blocked in blocked_aliases().items():
        if blocked_alias == alias and kind in (None, blocked_kind):
            raise PluginUnavailableError(blocked.message())


@attrs.frozen
class PluginInfo:
    """One entry point of one distribution, as metadata describes it."""

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    alias: str
    distribution: str
    version: str
    target: str
    requires_core: str | None = None
    status: str = STATUS_OK
    reason: str = ""

    @property
    def pinned_name(self) -> str:
        return f"{self.distribution}:{self.alias}"

    @property
    def selectable(self) -> bool:
        return self.status in (STATUS_OK, STATUS_EXPLICIT_ONLY)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _env_flag(name: str, default: str) -> str:
    return os.environ.get(name, default).strip().lower()


def strict_plugins() -> bool:
    """``CORE_STRICT_PLUGINS=1``: a broken, conflicting or incompatible plugin is fatal."""
    return _env_flag("CORE_STRICT_PLUGINS", "0") in ("1", "true", "yes")


def autoload_enabled() -> bool:
    """``CORE_PLUGINS_AUTOLOAD=0``: only the core's own plugins and explicitly named ones load."""
    return _env_flag("CORE_PLUGINS_AUTOLOAD", "1") not in ("0", "false", "no")


def disabled_names() -> frozenset[str]:
    """``CORE_DISABLE_PLUGINS=a,b``: aliases, ``dist:alias`` pins or distribution names to block."""
    raw = os.environ.get("CORE_DISABLE_PLUGINS", "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def core_version() -> str:
    """The running core's version (the one plugins must be compatible with)."""
    return __version__


def _is_disabled(kind: str, alias: str, distribution: str, blocked: frozenset[str]) -> bool:
    dist_name = canonical_name(distribution)
    for name in blocked:
        scope, _, blocked_alias = name.rpartition(":")
        if not scope:
            if name == alias or canonical_name(name) == dist_name:
                return True
        elif blocked_alias == alias and (scope == kind or canonical_name(scope) == dist_name):
            return True
    return False


def _raw_entries() -> Iterator[tuple[str, EntryPointRecord]]:
    kind_of_group = {ENTRY_POINT_GROUPS[kind]: kind for kind in KINDS}
    for record in entry_points(kind_of_group):
        yield kind_of_group[record.group], record


@attrs.frozen
class Catalog:
    """Every installed plugin entry point with its status, and lookup by alias."""

    entries: tuple[PluginInfo, ...]

    def of_kind(self, kind: str) -> list[PluginInfo]:
        """The installed entries of ``kind`` (not the blocked aliases listing shows as unavailable)."""
        return [info for info in self.entries if info.kind == kind and info.status != STATUS_UNAVAILABLE]

    def refuse_blocked(self, alias: str, kind: str | None = None) -> None:
        """An unknown alias that is a blocked one (``ipu``, ``hpu``, ...) raises the error that says why."""
        refuse_blocked(alias, kind)

    def aliases(self, kind: str) -> list[str]:
        return sorted({info.alias for info in self.of_kind(kind) if info.selectable})

    def installed_aliases(self, kind: str) -> list[str]:
        """Every alias of ``kind`` an installed distribution declares, conflicting or not (for messages)."""
        return sorted({info.alias for info in self.of_kind(kind)})

    def lookup(self, kind: str, name: str) -> PluginInfo:
        """The entry for ``name`` (an alias or a ``dist:alias`` pin), or a :class:`CoreError` saying why not."""
        pinned_dist, _, alias = name.rpartition(":")
        candidates = [info for info in self.of_kind(kind) if info.alias == alias]
        if pinned_dist:
            candidates = [
                info for info in candidates
                if canonical_name(info.distribution) == canonical_name(pinned_dist)
            ]
        if not candidates:
            refuse_blocked(alias, kind)
            raise UnknownPluginError(
                kind, name, self.installed_aliases(kind), first_party().get((kind, alias)), installable_aliases(kind)
            )
        active = [info for info in candidates if info.status != STATUS_DISABLED]
        if not active:
            raise PluginDisabledError(
                f"The {kind} {name!r} from {candidates[0].distribution} is disabled by "
                f"CORE_DISABLE_PLUGINS={os.environ.get('CORE_DISABLE_PLUGINS', '')!r}; "
                f"remove it from that variable to use it."
            )
        if len(active) > 1:
            raise PluginConflictError(kind, alias, [info.distribution for info in active])
        info = active[0]
        if info.status == STATUS_INCOMPATIBLE:
            raise IncompatiblePluginError(info.reason)
        return info

    def auto_candidates(self, kind: str) -> list[PluginInfo]:
        """The plugins of ``kind`` that auto-detection may import: selectable, autoloaded, unambiguous."""
        by_alias: dict[str, list[PluginInfo]] = defaultdict(list)
        for info in self.of_kind(kind):
            if info.status == STATUS_OK:
                by_alias[info.alias].append(info)
        return [infos[0] for infos in by_alias.values() if len(infos) == 1]


def discover() -> Catalog:
    """Read every plugin entry point from distribution metadata. Imports no plugin code."""
    blocked = disabled_names()
    autoload = autoload_enabled()
    installed_core = core_version()
    requirement_cache: dict[str, str | None] = {}
    entries: list[PluginInfo] = []
    seen: set[tuple[str, str, str]] = set()
    for kind, entry_point in _raw_entries():
        distribution, version = entry_point.distribution, entry_point.version
        key = (kind, entry_point.name, canonical_name(distribution))
        if key in seen:
            continue
        seen.add(key)
        if distribution not in requirement_cache:
            requirement_cache[distribution] = requirement_on(CORE_DISTRIBUTION, entry_point.requires)
        requires_core = requirement_cache[distribution]
        status, reason = STATUS_OK, ""
        if _is_disabled(kind, entry_point.name, distribution, blocked):
            status, reason = STATUS_DISABLED, "blocked by CORE_DISABLE_PLUGINS"
        elif requires_core and not satisfies(installed_core, requires_core):
            status = STATUS_INCOMPATIBLE
            reason = (
                f"{distribution} {version} requires core{requires_core}, but core {installed_core} is "
                f"installed; install a matching pair, e.g. pip install --upgrade {distribution}"
            )
        elif not autoload and canonical_name(distribution) != CORE_DISTRIBUTION:
            status, reason = STATUS_EXPLICIT_ONLY, "CORE_PLUGINS_AUTOLOAD=0: used only when named in code"
        entries.append(
            PluginInfo(kind, entry_point.name, distribution, version, entry_point.value, requires_core, status, reason)
        )
    entries = [_with_legacy_note(info) for info in _mark_conflicts(entries)]
    claimed = {(info.kind, info.alias) for info in entries}
    entries += [blocked.as_info() for key, blocked in blocked_aliases().items() if key not in claimed]
    catalog = Catalog(tuple(sorted(entries, key=lambda info: (KINDS.index(info.kind), info.alias, info.distribution))))
    if strict_plugins():
        _raise_first_problem(catalog.entries)
    return catalog


def _with_legacy_note(info: PluginInfo) -> PluginInfo:
    note = legacy_note(info.kind, info.alias) if info.status == STATUS_OK and not info.reason else None
    return attrs.evolve(info, reason=note) if note else info


def _mark_conflicts(entries: list[PluginInfo]) -> list[PluginInfo]:
    claims: dict[tuple[str, str], list[PluginInfo]] = defaultdict(list)
    for info in entries:
        if info.status != STATUS_DISABLED:
            claims[(info.kind, info.alias)].append(info)
    marked = []
    for info in entries:
        rivals = claims.get((info.kind, info.alias), [])
        if len(rivals) > 1 and info.status in (STATUS_OK, STATUS_EXPLICIT_ONLY):
            others = ", ".join(sorted(rival.distribution for rival in rivals if rival is not info))
            info = attrs.evolve(info, status=STATUS_CONFLICT, reason=f"alias also provided by {others}")
        marked.append(info)
    return marked


def _raise_first_problem(entries: Iterable[PluginInfo]) -> None:
    for info in entries:
        if info.status == STATUS_CONFLICT:
            rivals = [other.distribution for other in entries if (other.kind, other.alias) == (info.kind, info.alias)]
            raise PluginConflictError(info.kind, info.alias, rivals)
        if info.status == STATUS_INCOMPATIBLE:
            raise IncompatiblePluginError(info.reason + " (fatal because CORE_STRICT_PLUGINS=1)")


def import_factory(info: PluginInfo) -> Any:
    """Import the entry point's target (the factory), without calling it."""
    module_name, _, attribute = info.target.partition(":")
    try:
        module = __import__(module_name, fromlist=["_"])
        factory: Any = module
        for part in attribute.split(".") if attribute else ():
            factory = getattr(factory, part)
    except Exception as error:
        raise BrokenPluginError(
            f"The {info.kind} plugin {info.alias!r} from {info.distribution} {info.version} failed to import "
            f"({info.target}): {type(error).__name__}: {error}. Reinstall it (pip install --force-reinstall "
            f"{info.distribution}) or block it with CORE_DISABLE_PLUGINS={info.distribution}."
        ) from error
    return factory


def import_all(catalog: Catalog, kinds: Iterable[str]) -> None:
    """``CORE_STRICT_PLUGINS=1``: import every installed plugin of ``kinds``; the first that fails is fatal.

    A plugin that the run does not select is imported too (its factory is not called), so that a broken
    installation fails every run, not only the runs that happen to pick it.
    """
    wanted = set(kinds)
    for info in catalog.entries:
        if info.kind in wanted and info.selectable:
            try:
                import_factory(info)
            except BrokenPluginError as error:
                raise BrokenPluginError(
                    f"{error} (fatal because CORE_STRICT_PLUGINS=1 imports every installed {info.kind} plugin, "
                    f"used or not)"
                ) from error.__cause__


def load(info: PluginInfo, options: dict[str, Any] | None = None) -> object:
    """Import the entry point's target and call it with the user's options to get the plugin object."""
    factory = import_factory(info)
    try:
        plugin = factory(**(options or {}))
    except CoreError:
        raise
    except Exception as error:
        raise BrokenPluginError(
            f"The {info.kind} plugin {info.alias!r} from {info.distribution} {info.version} failed to "
            f"construct with options {options or {}}: {type(error).__name__}: {error}."
        ) from error
    return plugin
