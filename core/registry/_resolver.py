"""The resolver: from the user's aliases and objects to the active set of one run.

Choice is data. Candidates come from the catalog of installed entry points; each plugin object declares
what it supports (``supports``), its rank among auto candidates (``priority``) and how many processes
it can run (``max_processes``). One walk settles the kinds in order, then every pair of the active set
is checked against the declarations. Nothing here knows a particular plugin.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any, Final

import pluggy

from core import hookspecs
from core._checks import is_whole
from core._errors import (
    BrokenPluginError,
    ConfigurationError,
    CoreError,
    CoreWarning,
    PluginUnavailableError,
    UnknownPluginError,
)
from core._markers import PluginManager
from core._records import KINDS, ResolvedConfig, Supports
from core._traits import PluginTraits, traits_of
from core.registry._active import ActiveSet
from core.registry._devices import DeviceRequest, parse_devices
from core.registry._discovery import (
    Catalog,
    PluginInfo,
    discover,
    first_party,
    import_all,
    load,
    strict_plugins,
)

DEFAULTS: Final = {"precision": "32-true", "checkpoint_io": "torch"}
RUN_KINDS: Final = ("accelerator", "strategy", "precision", "environment", "checkpoint_io")
"""The kinds every run resolves (extensions only when ``plugins=[...]`` names some)."""


class Selection:
    """One chosen plugin: its alias, the distribution it came from, and the object."""

    __slots__ = ("alias", "distribution", "kind", "plugin", "traits")

    def __init__(self, kind: str, alias: str, distribution: str, plugin: object) -> None:
        self.kind = kind
        self.alias = alias
        self.distribution = distribution
        self.plugin = plugin
        self.traits: PluginTraits = traits_of(plugin, kind, alias)

    @property
    def name(self) -> str:
        """The canonical name compatibility rules match (``cuda`` for the ``gpu`` alias)."""
        return self.traits.name

    @property
    def label(self) -> str:
        """The name for messages: ``'64-true'``, or ``'64-true' (given as '64')`` for a legacy alias."""
        return repr(self.name) if self.name == self.alias else f"{self.name!r} (given as {self.alias!r})"

    @property
    def supports(self) -> Supports:
        return self.traits.supports


def plugin_kind(plugin: object) -> str:
    kind = getattr(plugin, "kind", None)
    if kind not in KINDS:
        raise ConfigurationError(
            f"{plugin!r} does not declare a valid `kind` attribute (got {kind!r}); a plugin object passed "
            f"in code must set kind to one of {list(KINDS)}."
        )
    return str(kind)


def _from_object(kind: str, plugin: object) -> Selection:
    found = plugin_kind(plugin)
    if found != kind:
        raise ConfigurationError(f"{plugin!r} is a {found} plugin, but it was passed as the {kind}.")
    module = type(plugin).__module__.split(".")[0]
    return Selection(kind, traits_of(plugin, kind).name, f"{module} (object)", plugin)


def _from_alias(catalog: Catalog, kind: str, alias: str) -> Selection:
    info = catalog.lookup(kind, alias)
    return Selection(kind, info.alias, info.distribution, load(info))


def ask(plugin: object, kind: str, hook_name: str, **kwargs: Any) -> Any:
    """Call one hook of one plugin outside a run (detection, availability), blaming it on failure."""
    manager = _manager()
    name = traits_of(plugin, kind).name
    _register(manager, kind, name, plugin)
    try:
        return getattr(manager.hook, hook_name)(**kwargs)
    except CoreError:
        raise
    except Exception as error:
        raise BrokenPluginError(
            f"The {kind} plugin {name!r} raised in {hook_name}: "
            f"{type(error).__name__}: {error}"
        ) from error


def _manager() -> pluggy.PluginManager:
    manager = PluginManager()
    manager.add_hookspecs(hookspecs)
    return manager


def _register(manager: pluggy.PluginManager, kind: str, alias: str, plugin: object) -> None:
    """Register one plugin object for one run (or one question); its traits and hooks are checked first."""
    traits_of(plugin, kind, alias)
    where = f"The {kind} plugin {alias!r} ({type(plugin).__module__}.{type(plugin).__qualname__})"
    try:
        manager.register(plugin, name=f"{kind}:{alias}")
    except (pluggy.PluginValidationError, ValueError) as error:
        raise BrokenPluginError(f"{where} cannot be registered: {error}") from error
    implemented = {caller.name for caller in manager.get_hookcallers(plugin) or ()}
    foreign = sorted(
        name for name in implemented
        if kind != "extension" and name != "core_attach" and not name.startswith(f"{kind}_")
    )
    unknown = sorted(name for name in implemented if not hasattr(hookspecs, name))
    missing = sorted(set(hookspecs.REQUIRED_HOOKS[kind]) - implemented)
    problems = []
    if unknown:
        problems.append(f"implements hooks that the contract does not define: {unknown}")
    if foreign:
        problems.append(f"implements hooks of another kind: {foreign} (only {kind}_* hooks are allowed)")
    if missing:
        problems.append(f"lacks required hooks: {missing}")
    if problems:
        manager.unregister(plugin)
        raise BrokenPluginError(f"{where} " + "; ".join(problems) + ". See core/hookspecs.py.")


def is_interactive() -> bool:
    """A REPL or a notebook kernel: only fork-based strategies can start processes from there."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def _warn_or_raise(error: CoreError) -> None:
    if strict_plugins():
        raise error
    warnings.warn(f"{error} (skipped; set CORE_STRICT_PLUGINS=1 to make this fatal)", CoreWarning, stacklevel=4)


def _load_candidates(catalog: Catalog, kind: str) -> list[Selection]:
    """Every auto candidate of ``kind``, highest priority first; broken ones are skipped with a warning."""
    loaded = []
    for info in catalog.auto_candidates(kind):
        try:
            loaded.append(Selection(kind, info.alias, info.distribution, load(info)))
        except CoreError as error:
            _warn_or_raise(error)
    # Aliases of one factory (``gpu`` and ``cuda``) load twice; keep the first by canonical name.
    unique: dict[str, Selection] = {}
    for selection in loaded:
        unique.setdefault(selection.name, selection)
    return sorted(unique.values(), key=lambda s: (-s.traits.priority, s.alias))


def _auto_accelerator(catalog: Catalog) -> Selection:
    candidates = _load_candidates(catalog, "accelerator")
    for candidate in candidates:
        try:
            if ask(candidate.plugin, "accelerator", "accelerator_is_available"):
                return candidate
        except CoreError as error:
            _warn_or_raise(error)
    raise PluginUnavailableError(
        "accelerator='auto' found no usable accelerator among the installed ones: "
        f"{[c.alias for c in candidates] or 'none'}. Reinstall core (pip install --force-reinstall core) "
        "to restore the built-in 'cpu', or unset CORE_DISABLE_PLUGINS."
    )


def _detect_environment(catalog: Catalog) -> Selection:
    candidates = _load_candidates(catalog, "environment")
    detector = _manager()
    by_plugin = {}
    # pluggy calls the most recently registered implementation first: register lowest priority first.
    for candidate in reversed(candidates):
        try:
            _register(detector, "environment", candidate.alias, candidate.plugin)
        except CoreError as error:
            _warn_or_raise(error)
            continue
        by_plugin[id(candidate.plugin)] = candidate
    winner = detector.hook.environment_detect()
    if winner is None or id(winner) not in by_plugin:
        raise ConfigurationError(
            "No cluster environment claimed this process and the built-in 'local' is not installed; "
            f"installed environments: {[c.alias for c in candidates]}. Pass plugins=['local'] or reinstall core."
        )
    return by_plugin[id(winner)]


def detect_environment(catalog: Catalog | None = None) -> str:
    """The alias of the environment that auto-detection picks for this process (what :func:`resolve` uses).

    Imports the installed environments only (not torch); broken ones are skipped with a warning, as in a run.
    """
    return _detect_environment(catalog if catalog is not None else discover()).alias


def _find_plugin_alias(catalog: Catalog, alias: str) -> tuple[str, PluginInfo]:
    """A plugin named in ``plugins=[...]``: find the kind that provides the alias."""
    _, _, bare = alias.rpartition(":")
    kinds = [kind for kind in KINDS if any(info.alias == bare for info in catalog.of_kind(kind))]
    if len(kinds) > 1:
        raise ConfigurationError(
            f"plugins=[{alias!r}] is ambiguous: it is a {' and a '.join(kinds)} alias. Pass it as the "
            f"matching argument instead (for example {kinds[0]}={alias!r})."
        )
    if not kinds:
        catalog.refuse_blocked(bare)  # ipu, hpu, ...: say what they need and why it cannot be installed
        known = sorted({info.alias for kind in KINDS for info in catalog.of_kind(kind)})
        provider = next((dist for (_, known_alias), dist in first_party().items() if known_alias == bare), None)
        raise UnknownPluginError("plugin", alias, known, provider)
    return kinds[0], catalog.lookup(kinds[0], alias)


def _split_plugins(catalog: Catalog, plugins: Sequence[object]) -> tuple[dict[str, Selection], list[Selection]]:
    by_kind: dict[str, Selection] = {}
    extensions: list[Selection] = []
    for item in plugins:
        if isinstance(item, str):
            kind, info = _find_plugin_alias(catalog, item)
            selection = Selection(kind, info.alias, info.distribution, load(info))
        else:
            selection = _from_object(plugin_kind(item), item)
        if selection.kind == "extension":
            if any(existing.alias == selection.alias for existing in extensions):
                raise ConfigurationError(f"The extension {selection.alias!r} is listed twice in plugins=[...].")
            extensions.append(selection)
        elif selection.kind in by_kind:
            raise ConfigurationError(
                f"plugins=[...] holds two {selection.kind} plugins, {by_kind[selection.kind].alias!r} and "
                f"{selection.alias!r}; a run has exactly one."
            )
        else:
            by_kind[selection.kind] = selection
    return by_kind, extensions


def _normalise_precision(precision: object) -> object:
    if isinstance(precision, bool):
        raise ConfigurationError(f"precision={precision!r} is not a precision; expected an alias like '32-true'.")
    if isinstance(precision, int):
        return str(precision)
    return precision


def _choose(catalog: Catalog, kind: str, value: object, from_plugins: dict[str, Selection]) -> Selection | None:
    """The selection for one kind given the argument and ``plugins=[...]``, or None when still open."""
    given = value is not None and value != "auto"
    if kind in from_plugins:
        if given:
            raise ConfigurationError(
                f"The {kind} is given twice: {kind}={value!r} and {from_plugins[kind].alias!r} in plugins=[...]."
            )
        return from_plugins[kind]
    if not given:
        return None
    if isinstance(value, str):
        return _from_alias(catalog, kind, value)
    return _from_object(kind, value)


def _check_num_nodes(num_nodes: object) -> int:
    if not is_whole(num_nodes, 1):
        raise ConfigurationError(f"Invalid num_nodes={num_nodes!r}: expected a whole number >= 1.")
    return num_nodes


def _auto_strategy(world_size: int, accelerator: Selection) -> str:
    """Lightning's rule, unless the accelerator declares its own (``auto_strategies``, e.g. TPUs use xla)."""
    declared = accelerator.traits.auto_strategies
    if world_size == 1:
        return str(declared.get("single", "single_device"))
    if is_interactive():
        return str(declared.get("interactive", "ddp_notebook"))
    return str(declared.get("multi", "ddp"))


def _auto_selection(catalog: Catalog, kind: str, alias: str, because: str) -> Selection:
    try:
        return _from_alias(catalog, kind, alias)
    except UnknownPluginError as error:
        error.args = (f"{kind}='auto' picks {alias!r} for {because}, but it is not installed. {error}",)
        raise


def _check_compatibility(selections: Sequence[Selection]) -> None:
    for holder in selections:
        for other in selections:
            if other is holder or holder.supports.allows(other.kind, other.name):
                continue
            hint = f" {holder.supports.hint}" if holder.supports.hint else ""
            raise ConfigurationError(
                f"The {holder.kind} {holder.label} ({holder.distribution}) does not support the {other.kind} "
                f"{other.label} ({other.distribution}); it declares: {holder.supports.describe()}.{hint}"
            )


def _check_process_count(strategy: Selection, world_size: int, devices: object, num_nodes: int) -> None:
    limit = strategy.traits.max_processes
    if limit is not None and world_size > limit:
        raise ConfigurationError(
            f"The strategy {strategy.alias!r} runs at most {limit} process(es), but devices={devices!r} x "
            f"num_nodes={num_nodes} asks for {world_size}. Use strategy='ddp' (pip install core-ddp) for "
            f"several processes, or devices=1."
        )


def _devices_request(devices: object, environment: Selection) -> DeviceRequest:
    """The parsed ``devices``; ``"auto"`` becomes the launcher's process count when the environment fixes it."""
    request = parse_devices(devices)
    if request.auto:
        started = ask(environment.plugin, "environment", "environment_processes_per_node")
        if started is not None:
            if not is_whole(started, 1):
                raise BrokenPluginError(
                    f"The environment {environment.alias!r} returned {started!r} from "
                    "environment_processes_per_node; expected a whole number >= 1 or None."
                )
            return DeviceRequest(count=started)
    return request


def resolve(
    accelerator: object = "auto",
    strategy: object = "auto",
    devices: object = "auto",
    num_nodes: object = 1,
    precision: object = None,
    plugins: Sequence[object] | None = None,
    catalog: Catalog | None = None,
) -> ActiveSet:
    """Resolve the user's choices into the active set of a run. Only :class:`CoreError` escapes."""
    catalog = catalog if catalog is not None else discover()
    if strict_plugins():
        import_all(catalog, (*RUN_KINDS, *(["extension"] if plugins else [])))
    from_plugins, extensions = _split_plugins(catalog, list(plugins or ()))
    nodes = _check_num_nodes(num_nodes)

    chosen_accelerator = _choose(catalog, "accelerator", accelerator, from_plugins) or _auto_accelerator(catalog)
    chosen_environment = _choose(catalog, "environment", None, from_plugins) or _detect_environment(catalog)
    request = _devices_request(devices, chosen_environment)
    device_ids = ask(chosen_accelerator.plugin, "accelerator", "accelerator_parse_devices", devices=request)
    if not device_ids:
        raise BrokenPluginError(
            f"The accelerator {chosen_accelerator.alias!r} returned no device indices for devices={devices!r}."
        )
    world_size = len(device_ids) * nodes

    chosen_strategy = _choose(catalog, "strategy", strategy, from_plugins) or _auto_selection(
        catalog, "strategy", _auto_strategy(world_size, chosen_accelerator), f"devices={devices!r} x num_nodes={nodes}"
    )
    chosen_precision = _choose(catalog, "precision", _normalise_precision(precision), from_plugins) or _from_alias(
        catalog, "precision", DEFAULTS["precision"]
    )
    default_io = chosen_strategy.traits.default_checkpoint_io
    chosen_io = _choose(catalog, "checkpoint_io", None, from_plugins) or _from_alias(
        catalog, "checkpoint_io", default_io
    )

    selections = [chosen_accelerator, chosen_strategy, chosen_precision, chosen_environment, chosen_io, *extensions]
    _check_compatibility(selections)
    _check_process_count(chosen_strategy, world_size, devices, nodes)
    ask(
        chosen_environment.plugin, "environment", "environment_validate_settings",
        devices_per_node=len(device_ids), num_nodes=nodes,
    )

    config = ResolvedConfig(
        accelerator=chosen_accelerator.name,
        strategy=chosen_strategy.name,
        precision=chosen_precision.name,
        environment=chosen_environment.name,
        checkpoint_io=chosen_io.name,
        extensions=tuple(selection.name for selection in extensions),
        device_ids=tuple(device_ids),
        num_nodes=nodes,
        distributions={
            **{s.kind: s.distribution for s in selections if s.kind != "extension"},
            **{f"extension:{s.name}": s.distribution for s in extensions},
        },
    )
    manager = _manager()
    for selection in selections:
        _register(manager, selection.kind, selection.alias, selection.plugin)
    active = ActiveSet(
        config,
        manager,
        {s.kind: s.plugin for s in selections if s.kind != "extension"},
        {s.name: s.plugin for s in extensions},
    )
    manager.hook.core_attach(active=active)
    return active
