"""An import-linter contract for plugin distributions: import only the public API of core and of each other.

A module path is private when a part after its top-level package starts with an underscore
(``core._errors``, ``core.toolkit._storage``, ``core_ddp._launchers``) or when it is ``core.builtin``, the
built-in plugins, whose classes are reached through :mod:`core.toolkit`. A plugin may import its own private
modules. Use it in your own repository's ``pyproject.toml``::

    [tool.importlinter]
    root_packages = ["core", "core_mine"]
    contract_types = ["public_api: core.testing.import_contracts.PublicApiContract"]

    [[tool.importlinter.contracts]]
    name = "core_mine imports only public names"
    type = "public_api"

``lint-imports`` then fails naming each offending import with its line, for example
``core_mine._strategy -> core._errors (l.12)``. Needs ``import-linter``.
"""

from __future__ import annotations

from typing import Any, Final

import grimp
from importlinter import Contract, ContractCheck, fields, output

PRIVATE_PACKAGES: Final = {"core": ("builtin",)}
"""Public-looking subpackages that are private all the same: core.builtin holds the built-in plugins."""


def is_private(module: str) -> bool:
    """Whether ``module`` is private to its top-level package (see the module docstring)."""
    top, *rest = module.split(".")
    if rest and rest[0] in PRIVATE_PACKAGES.get(top, ()):
        return True
    return any(part.startswith("_") and not part.startswith("__") for part in rest)


class PublicApiContract(Contract):
    """Modules of ``plugin_packages`` import no private module of another top-level package.

    Options: ``core_package`` (default ``core``); ``plugin_packages`` (default: every root package but the
    core one).
    """

    type_name = "public_api"

    core_package = fields.StringField(required=False, default="core")
    plugin_packages = fields.ListField(subfield=fields.StringField(), required=False)

    def _plugins(self) -> list[str]:
        listed: Any = self.plugin_packages
        if listed:
            return [str(name) for name in listed]
        roots = self.session_options.get("root_packages") or [self.session_options.get("root_package")]
        return sorted(str(root) for root in roots if root and root != self.core_package)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        illegal = []
        for plugin in self._plugins():
            for importer in sorted({plugin, *graph.find_descendants(plugin)}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if imported.split(".")[0] == plugin or not is_private(imported):
                        continue
                    lines = tuple(detail["line_number"] for detail in graph.get_import_details(
                        importer=importer, imported=imported
                    ))
                    illegal.append({"importer": importer, "imported": imported, "line_numbers": lines})
        return ContractCheck(kept=not illegal, metadata={"illegal_imports": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Imports of private modules (a part starting with '_', or core.builtin):", bold=False)
        output.new_line()
        for link in check.metadata["illegal_imports"]:
            lines = ", ".join(str(number) for number in link["line_numbers"])
            output.print_error(f"- {link['importer']} -> {link['imported']} (l.{lines})", bold=False)
            output.new_line()
        output.print_error(
            "Use the documented names of core, core.hookspecs, core.toolkit and core.testing, or another plugin's "
            "public __init__ (declared as a dependency). If you need something private, ask for it to be made public.",
            bold=False,
        )
        output.new_line()
