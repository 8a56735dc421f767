"""The compatibility matrix: every pair of installed plugins of two kinds, judged as the resolver judges it.

Each cell asks exactly the resolver's question (``_check_compatibility`` on the pair), so the matrix
and a real run cannot disagree. Building it imports the plugins, like ``--check``, but asks no hardware
anything: an accelerator that cannot run here still gets its column.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final

import attrs

from core._errors import ConfigurationError, CoreDeprecationWarning, CoreError
from core._records import Supports
from core._traits import traits_of
from core.registry._discovery import Catalog, PluginInfo, load

PAIRS: Final = (("precision", "accelerator"), ("strategy", "accelerator"), ("precision", "strategy"))
"""The tables of the matrix: (row kind, column kind)."""


@attrs.frozen
class Member:
    """One plugin of the matrix under its canonical name, with every alias that selects it."""

    kind: str
    name: str
    aliases: tuple[str, ...]
    distribution: str
    supports: Supports = attrs.field(eq=False, repr=False)


@attrs.frozen
class Cell:
    """One pair: accepted, or refused by the declarations of ``refused_by`` with the resolver's message."""

    row: str
    column: str
    refused_by: tuple[str, ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.refused_by


@attrs.frozen
class Table:
    row_kind: str
    column_kind: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: tuple[Cell, ...]

    def cell(self, row: str, column: str) -> Cell:
        return next(cell for cell in self.cells if (cell.row, cell.column) == (row, column))


@attrs.frozen
class Skipped:
    """An installed plugin left out of the matrix, and why (disabled, conflicting, broken)."""

    kind: str
    alias: str
    distribution: str
    reason: str


@attrs.frozen
class Matrix:
    members: tuple[Member, ...]
    tables: tuple[Table, ...]
    skipped: tuple[Skipped, ...]

    def of_kind(self, kind: str) -> list[Member]:
        return [member for member in self.members if member.kind == kind]

    def member(self, kind: str, name: str) -> Member:
        return next(member for member in self.members if (member.kind, member.name) == (kind, name))


def _load_members(
    catalog: Catalog, kind: str, distributions: Collection[str] | None
) -> tuple[list[Member], list[Skipped], dict[str, object]]:
    members: dict[str, Member] = {}
    plugins: dict[str, object] = {}
    skipped: list[Skipped] = []
    for info in catalog.of_kind(kind):
        if distributions is not None and info.distribution not in distributions:
            continue
        plugin = _load_quietly(info, skipped)
        if plugin is None:
            continue
        traits = traits_of(plugin, kind, info.alias)
        name = traits.name
        known = members.get(name)
        if known is None:
            members[name] = Member(kind, name, (info.alias,), info.distribution, traits.supports)
            plugins[name] = plugin
        else:
            members[name] = attrs.evolve(known, aliases=tuple(sorted({*known.aliases, info.alias})))
    ordered = sorted(members.values(), key=lambda member: member.name)
    return ordered, skipped, plugins


def _load_quietly(info: PluginInfo, skipped: list[Skipped]) -> object | None:
    if not info.selectable:
        skipped.append(Skipped(info.kind, info.alias, info.distribution, f"{info.status}: {info.reason}"))
        return None
    try:
        # Legacy aliases ("16", "bf16") warn when loaded; the matrix lists them as aliases instead.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CoreDeprecationWarning)
            return load(info)
    except CoreError as error:
        skipped.append(Skipped(info.kind, info.alias, info.distribution, f"broken: {error}"))
        return None


def _judge(row: Member, column: Member, plugins: dict[tuple[str, str], object]) -> Cell:
    from core.registry._resolver import Selection, _check_compatibility

    refused_by = tuple(
        holder.name
        for holder, other in ((row, column), (column, row))
        if not holder.supports.allows(other.kind, other.name)
    )
    if not refused_by:
        return Cell(row.name, column.name)
    selections = [
        Selection(member.kind, member.name, member.distribution, plugins[(member.kind, member.name)])
        for member in (row, column)
    ]
    try:
        _check_compatibility(selections)
    except ConfigurationError as error:
        return Cell(row.name, column.name, refused_by, str(error))
    raise CoreError(f"The resolver accepts {row.name!r} with {column.name!r} although their declarations refuse it.")


def build_matrix(catalog: Catalog, distributions: Collection[str] | None = None) -> Matrix:
    """Load the installed plugins of the matrix's kinds (only ``distributions`` when given) and judge every pair."""
    members: list[Member] = []
    skipped: list[Skipped] = []
    plugins: dict[tuple[str, str], object] = {}
    for kind in ("accelerator", "strategy", "precision"):
        loaded, left_out, objects = _load_members(catalog, kind, distributions)
        members += loaded
        skipped += left_out
        plugins.update({(kind, name): plugin for name, plugin in objects.items()})
    tables = []
    for row_kind, column_kind in PAIRS:
        rows = [member for member in members if member.kind == row_kind]
        columns = [member for member in members if member.kind == column_kind]
        cells = tuple(_judge(row, column, plugins) for row in rows for column in columns)
        tables.append(
            Table(row_kind, column_kind, tuple(m.name for m in rows), tuple(m.name for m in columns), cells)
        )
    return Matrix(tuple(members), tuple(tables), tuple(skipped))


# -------------------------------------------------------------------------------------------------
# Rendering
# -------------------------------------------------------------------------------------------------


def _declarations(matrix: Matrix) -> list[Member]:
    """The members whose declarations refuse at least one cell, in table order."""
    refusing = {name for table in matrix.tables for cell in table.cells for name in cell.refused_by}
    return [member for member in matrix.members if member.name in refusing]


def _grid(table: Table, ok: str, refused: str) -> list[list[str]]:
    header = [f"{table.row_kind} \\ {table.column_kind}", *table.columns]
    rows = [header]
    for row in table.rows:
        cells = [table.cell(row, column) for column in table.columns]
        rows.append([row, *(ok if cell.ok else refused.format(", ".join(cell.refused_by)) for cell in cells)])
    return rows


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _declaration_line(member: Member) -> str:
    hint = f" {member.supports.hint}" if member.supports.hint else ""
    return f"{member.name} ({member.kind}, {member.distribution}): {member.supports.describe()}.{hint}"


def render_text(matrix: Matrix) -> str:
    """The matrix for a terminal: one grid per pair of kinds, then the declarations that refuse cells."""
    lines: list[str] = []
    for table in matrix.tables:
        lines.append(f"{table.row_kind} x {table.column_kind}")
        lines += [f"  {line}" for line in _aligned(_grid(table, "ok", "no ({})"))]
        lines.append("")
    declarations = _declarations(matrix)
    if declarations:
        lines.append("no (X): refused by the declaration of X:")
        lines += [f"  {_declaration_line(member)}" for member in declarations]
        lines.append("")
    aliases = [member for member in matrix.members if member.aliases != (member.name,)]
    if aliases:
        lines.append("aliases: " + "; ".join(f"{m.name} = {', '.join(m.aliases)}" for m in aliases))
    lines += [
        f"not in the matrix: {skipped.kind} {skipped.alias!r} ({skipped.distribution}), {skipped.reason}"
        for skipped in matrix.skipped
    ]
    return "\n".join(lines).rstrip() + "\n"


def _markdown_table(rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows[1:]]


def render_markdown(matrix: Matrix, intro: Iterable[str] = ()) -> str:
    """The matrix as a Markdown page (``docs/compatibility.md``)."""
    lines = ["# Compatibility", "", *intro]
    lines += ["", "| kind | name | aliases | distribution |", "|---|---|---|---|"]
    for member in matrix.members:
        aliases = ", ".join(f"`{alias}`" for alias in member.aliases)
        lines.append(f"| {member.kind} | `{member.name}` | {aliases} | {member.distribution} |")
    for table in matrix.tables:
        lines += ["", f"## {table.row_kind} x {table.column_kind}", ""]
        rows = _grid(table, "✓", "✗ ({})")
        rows = [[f"`{row[0]}`" if index else row[0], *row[1:]] for index, row in enumerate(rows)]
        lines += _markdown_table(rows)
    declarations = _declarations(matrix)
    if declarations:
        lines += ["", "## Why a combination is refused", "", "✗ (X) means the declaration of X refuses it:", ""]
        lines += [f"- {_declaration_line(member)}" for member in declarations]
    return "\n".join(lines) + "\n"


def as_json(matrix: Matrix) -> str:
    payload: dict[str, Any] = {
        "plugins": [
            {
                "kind": m.kind,
                "name": m.name,
                "aliases": list(m.aliases),
                "distribution": m.distribution,
                "supports": m.supports.describe(),
                "hint": m.supports.hint,
            }
            for m in matrix.members
        ],
        "tables": [
            {
                "rows": table.row_kind,
                "columns": table.column_kind,
                "cells": [
                    {"row": c.row, "column": c.column, "ok": c.ok, "refused_by": list(c.refused_by), "reason": c.reason}
                    for c in table.cells
                ],
            }
            for table in matrix.tables
        ],
        "skipped": [attrs.asdict(left_out) for left_out in matrix.skipped],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)
