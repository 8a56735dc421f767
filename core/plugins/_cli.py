"""The ``python -m core.plugins`` command.

Listing reads entry-point metadata only and imports neither torch nor any plugin; ``show`` and
``--check`` import plugins on purpose and say so.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any, Final

from core._errors import CoreDeprecationWarning, CoreError
from core._records import KINDS
from core._traits import traits_of
from core.hookspecs import CONTRACT_VERSION
from core.plugins._contract import ContractReport, inspect_contract
from core.registry._discovery import Catalog, PluginInfo, discover, load

_PROG = "python -m core.plugins"
LINE_WIDTH: Final = 100
"""``--check`` keeps its lines within this many characters; ``--verbose`` and ``--json`` give reasons whole."""

# What --check and show learnt about each imported plugin's hooks, by ``dist:alias``.
_contracts: dict[str, ContractReport] = {}


def _contract_notes(info: PluginInfo) -> list[str]:
    report = _contracts.get(info.pinned_name)
    return report.notes() if report is not None else []


def _contract_json(info: PluginInfo) -> dict[str, object] | None:
    report = _contracts.get(info.pinned_name)
    return report.as_dict() if report is not None else None


def _print_contract_notes(entries: Sequence[PluginInfo]) -> None:
    print(f"hook contract: version {CONTRACT_VERSION}")
    flagged = [(info, notes) for info in entries if (notes := _contract_notes(info))]
    if not flagged:
        print("  every imported plugin implements only current hooks")
    for info, notes in flagged:
        for note in notes:
            print(f"  {info.kind} {info.alias!r} ({info.distribution} {info.version}): {note}")


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _status(info: PluginInfo) -> str:
    return info.status if not info.reason else f"{info.status}: {info.reason}"


def _selected(catalog: Catalog, kind: str | None) -> list[PluginInfo]:
    return list(catalog.of_kind(kind) if kind else catalog.entries)


def _list(catalog: Catalog, kind: str | None, as_json: bool) -> int:
    entries = _selected(catalog, kind)
    if as_json:
        print(json.dumps([info.as_dict() for info in entries], indent=2))
        return 0
    rows = [(info.kind, info.alias, info.distribution, info.version, _status(info)) for info in entries]
    print(_table(rows, ("kind", "alias", "distribution", "version", "status")))
    return 0


def _check_one(info: PluginInfo) -> tuple[str, str, object | None]:
    """Import one plugin and ask whether it can run here: (status, reason, plugin object)."""
    from core.registry._resolver import _manager, _register, ask

    if not info.selectable:
        return info.status, info.reason, None
    try:
        with warnings.catch_warnings():  # a legacy alias warns whoever selects it, not a check of what is installed
            warnings.simplefilter("ignore", CoreDeprecationWarning)
            plugin = load(info)
        _contracts[info.pinned_name] = inspect_contract(plugin)
        _register(_manager(), info.kind, info.alias, plugin)
        traits = traits_of(plugin, info.kind, info.alias)
        explained = traits.reason_unavailable()
        if info.kind == "accelerator" and not ask(plugin, info.kind, "accelerator_is_available"):
            return "unavailable", explained or "no device of this kind is visible", plugin
        # Any kind may explain why it cannot run here (a strategy whose library does not import).
        if explained:
            return "unavailable", explained, plugin
        limitation = traits.limitation_here()
    except CoreError as error:
        return "broken", str(error), None
    return "usable", limitation or "", plugin


def _auto_choices(catalog: Catalog) -> dict[str, str]:
    from core.registry._resolver import _auto_accelerator, _detect_environment

    choices = {}
    for kind, pick in (("accelerator", _auto_accelerator), ("environment", _detect_environment)):
        try:
            selection = pick(catalog)
            choices[kind] = f"{selection.alias} ({selection.distribution})"
        except CoreError as error:
            choices[kind] = f"none: {error}"
    return choices


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)].rstrip() + "..."


def _wrapped(text: str, indent: str = "    ") -> str:
    return textwrap.fill(text, LINE_WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def _check_table(results: Sequence[tuple[PluginInfo, str, str]], verbose: bool) -> list[str]:
    """The table of statuses, then each reason: shortened to one line of :data:`LINE_WIDTH`, or whole and wrapped."""
    rows = [(info.kind, info.alias, info.distribution, info.version, status) for info, status, _ in results]
    lines = [_table(rows, ("kind", "alias", "distribution", "version", "check"))]
    explained = [(info, status, reason) for info, status, reason in results if reason]
    if explained:
        lines.append("")
    shortened = False
    for info, status, reason in explained:
        subject = f"{info.kind} {info.alias!r} ({info.distribution}): {status}: "
        if verbose:
            lines.append(subject.rstrip())
            lines.append(_wrapped(reason))
        else:
            line = _shorten(subject + reason, LINE_WIDTH)
            shortened = shortened or line.endswith("...")
            lines.append(line)
    if shortened:
        lines.append(f"(reasons shortened; {_PROG} --check --verbose or --json prints them whole)")
    return lines


def _check(catalog: Catalog, kind: str | None, as_json: bool, verbose: bool = False) -> int:
    results = [(info, *_check_one(info)[:2]) for info in _selected(catalog, kind)]
    auto = _auto_choices(catalog)
    if as_json:
        payload = {
            "plugins": [
                {**info.as_dict(), "check": status, "check_reason": reason, "contract": _contract_json(info)}
                for info, status, reason in results
            ],
            "auto": auto,
            "contract_version": CONTRACT_VERSION,
        }
        print(json.dumps(payload, indent=2))
    else:
        print("\n".join(_check_table(results, verbose)))
        print()
        for label, choice in (("accelerator='auto' would pick: ", auto["accelerator"]),
                              ("environment detected here:     ", auto["environment"])):
            print(textwrap.fill(label + choice, LINE_WIDTH, subsequent_indent=" " * len(label)) if verbose
                  else _shorten(label + choice, LINE_WIDTH))
        print()
        _print_contract_notes([info for info, _, _ in results])
    return 1 if any(status == "broken" for _, status, _ in results) else 0


def _hooks_of(plugin: object) -> list[str]:
    return sorted(
        name for name in dir(type(plugin))
        # Read from the class without running anything: a property named like a kind (a strategy's `precision`)
        # is no hook, and reading it on a plugin outside a run raises.
        if (name.startswith(KINDS) or name == "core_attach") and callable(inspect.getattr_static(type(plugin), name))
    )


def _show(catalog: Catalog, alias: str, kind: str | None, as_json: bool) -> int:
    matches = [info for info in _selected(catalog, kind) if alias in (info.alias, info.pinned_name)]
    if not matches:
        known = sorted({info.alias for info in catalog.entries})
        print(f"No installed plugin has the alias {alias!r}. Installed aliases: {', '.join(known)}.", file=sys.stderr)
        return 2
    details: list[dict[str, Any]] = []
    for info in matches:
        status, reason, plugin = _check_one(info)
        supports = getattr(plugin, "supports", None)
        details.append({
            **info.as_dict(),
            "check": status,
            "check_reason": reason,
            "hooks": _hooks_of(plugin) if plugin is not None else [],
            "contract": _contract_json(info),
            "contract_notes": _contract_notes(info),
            "supports": supports.describe() if supports is not None else "any combination",
            "doc": inspect.getdoc(type(plugin)) if plugin is not None else "",
        })
    if as_json:
        print(json.dumps(details, indent=2))
        return 0
    for detail in details:
        print(f"{detail['kind']} {detail['alias']!r}")
        detail["check"] += f": {detail['check_reason']}" if detail["check_reason"] else ""
        for key in ("distribution", "version", "target", "requires_core", "status", "check", "supports"):
            print(f"  {key + ':':<15}{detail[key]}")
        print(f"  {'hooks:':<15}{', '.join(detail['hooks']) or '-'}")
        for note in detail["contract_notes"]:
            print(f"  {'contract:':<15}{note}")
        if detail["doc"]:
            print("  " + detail["doc"].replace("\n", "\n  "))
        print()
    return 0


def _matrix(catalog: Catalog, as_json: bool) -> int:
    from core.plugins._matrix import as_json as matrix_json
    from core.plugins._matrix import build_matrix, render_text

    matrix = build_matrix(catalog)
    print(matrix_json(matrix) if as_json else render_text(matrix), end="\n" if as_json else "")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="List the installed core plugins (from metadata only), inspect one, or check them all.",
    )
    parser.add_argument(
        "command",
        nargs="?",
        default="list",
        choices=("list", "show", "matrix", "new"),
        help="default: list; matrix imports every plugin and prints which precisions, strategies and "
        "accelerators work together; new KIND NAME writes a plugin package from a template "
        f"(see {_PROG} new --help)",
    )
    parser.add_argument("alias", nargs="?", help="with show: the alias (or dist:alias) to inspect")
    parser.add_argument("--kind", choices=KINDS, help="only plugins of this kind")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--check", action="store_true", help="import every plugin and report whether it is usable here")
    parser.add_argument(
        "--verbose", "-v", action="store_true",
        help=f"with --check: every reason whole, wrapped at {LINE_WIDTH} columns (the table shortens them)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["new"]:
        from core.plugins._new import main as new_main

        return new_main(arguments[1:])
    args = _parser().parse_args(arguments)
    _contracts.clear()
    try:
        catalog = discover()
        if args.command == "show":
            if not args.alias:
                print(f"usage: {_PROG} show ALIAS [--kind KIND] [--json]", file=sys.stderr)
                return 2
            return _show(catalog, args.alias, args.kind, args.json)
        if args.command == "matrix":
            return _matrix(catalog, args.json)
        if args.check:
            return _check(catalog, args.kind, args.json, args.verbose)
        return _list(catalog, args.kind, args.json)
    except CoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
