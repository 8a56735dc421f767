"""How one plugin object stands against this core's hook contract: deprecated, unknown, newer.

Read statically from the plugin's ``@hookimpl`` markers and the specs in :mod:`core.hookspecs`, so that a
plugin the resolver refuses (it implements a hook this core does not know) can still be described.
Deprecation uses pluggy's own mechanism: a spec declared with ``warn_on_impl`` warns whenever an
implementation registers, which is what every run does; this module reads the same warning to report it.
"""

from __future__ import annotations

import inspect

import attrs

from core import hookspecs
from core._errors import CoreError
from core._markers import PluginManager
from core._traits import traits_of


@attrs.frozen
class ContractReport:
    """One plugin against this core's contract.

    :param declared: The plugin's ``contract_version``, ``None`` when it declares none.
    :param deprecated: ``(hook, message)`` for each implemented hook (or argument) that is deprecated.
    :param unknown: Implemented hooks this core does not define (the resolver refuses the plugin).
    """

    declared: int | None
    deprecated: tuple[tuple[str, str], ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def needs_newer_core(self) -> bool:
        return self.declared is not None and self.declared > hookspecs.CONTRACT_VERSION

    def notes(self) -> list[str]:
        """One sentence per finding, for the CLI; empty when the plugin is current."""
        found = [f"implements the deprecated hook {hook}: {message}" for hook, message in self.deprecated]
        if self.unknown:
            found.append(
                f"implements hooks unknown to this core (contract {hookspecs.CONTRACT_VERSION}): "
                f"{', '.join(self.unknown)}"
            )
        if self.needs_newer_core:
            found.append(
                f"written for contract {self.declared}, newer than this core's {hookspecs.CONTRACT_VERSION}: "
                f"upgrade core (pip install --upgrade core)"
            )
        return found

    def as_dict(self) -> dict[str, object]:
        return {
            "declared": self.declared,
            "deprecated": [{"hook": hook, "message": message} for hook, message in self.deprecated],
            "unknown": list(self.unknown),
        }


def _declared_version(plugin: object) -> int | None:
    try:
        return traits_of(plugin).contract_version
    except CoreError:  # a plugin with broken traits is reported by its registration, not here
        return None


def implemented_hooks(plugin: object) -> dict[str, list[str]]:
    """Hook name -> argument names, for every ``@hookimpl`` of ``plugin``, known to this core or not."""
    manager = PluginManager()
    found: dict[str, list[str]] = {}
    for attribute in dir(plugin):
        try:
            options = manager.parse_hookimpl_opts(plugin, attribute)
        except Exception:  # a property that raises before the run is attached is not a hook
            continue
        if options is None:
            continue
        hook_name = options.get("specname") or attribute
        try:
            found[hook_name] = list(inspect.signature(getattr(plugin, attribute)).parameters)
        except (TypeError, ValueError):
            found[hook_name] = []
    return found


def inspect_contract(plugin: object) -> ContractReport:
    """Compare ``plugin``'s hook implementations with the specs of this core."""
    manager = PluginManager()
    manager.add_hookspecs(hookspecs)
    deprecated: list[tuple[str, str]] = []
    unknown: list[str] = []
    for hook_name, argnames in sorted(implemented_hooks(plugin).items()):
        caller = getattr(manager.hook, hook_name, None)
        spec = caller.spec if caller is not None else None
        if spec is None:
            unknown.append(hook_name)
            continue
        if spec.warn_on_impl is not None:
            deprecated.append((hook_name, str(spec.warn_on_impl)))
        for argument, warning in (spec.warn_on_impl_args or {}).items():
            if argument in argnames:
                deprecated.append((f"{hook_name}({argument}=...)", str(warning)))
    return ContractReport(_declared_version(plugin), tuple(deprecated), tuple(unknown))
