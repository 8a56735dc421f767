"""Plugin entry points read straight from installed metadata directories: the fast path of discovery.

``importlib.metadata.entry_points()`` parses the whole ``METADATA`` file of every installed distribution
(hundreds in a data-science environment) to find the few that declare plugins, and checking their
``Requires-Dist`` through ``packaging`` compiles its large regular expressions on import. Both are paid on
every first ``resolve()`` in a process. Here the ``*.dist-info`` / ``*.egg-info`` directories on
``sys.path`` are listed (the order and the first-name-wins rule of ``importlib.metadata``), only their
``entry_points.txt`` is read, and only distributions that declare a plugin have their headers read.
Anything unusual (a zip on ``sys.path``, an egg-info with conditional requirements, a specifier that is
not a plain release comparison) takes the exact, slower route through ``importlib_metadata`` and
``packaging``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

_INFO_SUFFIXES: Final = (".dist-info", ".egg-info")
_NAME: Final = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
# ``core>=0.1,<0.2`` or ``core (>=0.1, <0.2)``: release numbers only, no extras, no marker.
_COMPARISON: Final = r"(?:[<>!=]=|[<>])\s*\d+(?:\.\d+)*"
_PLAIN_SPECIFIERS: Final = re.compile(rf"\s*\(?\s*({_COMPARISON}(?:\s*,\s*{_COMPARISON})*)?\s*\)?\s*")
_ONE_SPECIFIER: Final = re.compile(r"([<>!=]=|[<>])\s*(\d+(?:\.\d+)*)")
_RELEASE: Final = re.compile(r"\d+(?:\.\d+)*")


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them: ``Core_DDP`` and ``core-ddp`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen
class EntryPointRecord:
    """One entry point of a plugin group, with what discovery needs of its distribution."""

    group: str
    name: str
    value: str
    distribution: str
    version: str
    requires: tuple[str, ...]


def entry_points(groups: Iterable[str], paths: Sequence[str] | None = None) -> list[EntryPointRecord]:
    """Every entry point of ``groups`` installed on ``paths`` (``sys.path``), in path order."""
    wanted = frozenset(groups)
    seen: set[str] = set()
    found: list[EntryPointRecord] = []
    for entry in sys.path if paths is None else paths:
        directory = entry or os.getcwd()
        if os.path.isdir(directory):
            found.extend(_from_directory(directory, wanted, seen))
        elif os.path.isfile(directory):  # a zip or an egg: rare, read through importlib_metadata
            found.extend(_from_other(directory, wanted, seen))
    return found


def _from_directory(directory: str, wanted: frozenset[str], seen: set[str]) -> Iterator[EntryPointRecord]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        if not name.endswith(_INFO_SUFFIXES):
            continue
        key = canonical_name(name.rpartition(".")[0].partition("-")[0])
        if key in seen:
            continue
        seen.add(key)
        info = os.path.join(directory, name)
        text = _read(info, "entry_points.txt")
        if not text or "[core." not in text:
            continue
        points = _parse_entry_points(text, wanted)
        if points:
            distribution, version, requires = _headers(Path(info))
            yield from (
                EntryPointRecord(group, alias, value, distribution, version, requires)
                for group, alias, value in points
            )


def _from_other(entry: str, wanted: frozenset[str], seen: set[str]) -> Iterator[EntryPointRecord]:
    import importlib_metadata

    for dist in importlib_metadata.distributions(path=[entry]):
        key = canonical_name(dist.name or "")
        if key in seen:
            continue
        seen.add(key)
        for point in dist.entry_points:
            if point.group in wanted:
                yield EntryPointRecord(
                    point.group, point.name, point.value, dist.name, dist.version, tuple(dist.requires or ())
                )


def _read(directory: str, name: str) -> str | None:
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _parse_entry_points(text: str, wanted: frozenset[str]) -> list[tuple[str, str, str]]:
    """``(group, name, value)`` of the wanted groups in an ``entry_points.txt`` (an INI file)."""
    points = []
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group in wanted and "=" in line:
            name, _, value = line.partition("=")
            points.append((group, name.strip(), value.strip()))
    return points


def _headers(info: Path) -> tuple[str, str, tuple[str, ...]]:
    """Name, version and requirements of the distribution whose metadata directory is ``info``."""
    egg = info.name.endswith(".egg-info")
    text = _read(str(info), "PKG-INFO" if egg else "METADATA") or ""
    fields: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.split("\n\n", 1)[0].splitlines():
        if line[:1] in (" ", "\t") and last is not None:
            fields[last][-1] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            last = key.strip().lower()
            fields.setdefault(last, []).append(value.strip())
    name = (fields.get("name") or [info.name.partition("-")[0]])[0]
    version = (fields.get("version") or ["?"])[0]
    if not egg:
        return name, version, tuple(fields.get("requires-dist", ()))
    requires = _egg_requires(_read(str(info), "requires.txt") or "")
    if requires is None:  # conditional sections: let importlib_metadata turn them into markers
        import importlib_metadata

        requires = tuple(importlib_metadata.PathDistribution(info).requires or ())
    return name, version, requires


def _egg_requires(text: str) -> tuple[str, ...] | None:
    """The unconditional lines of a ``requires.txt``; ``None`` if a section holds a marker."""
    lines: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            if ":" in section:
                return None
        elif not section:  # lines under [extra] apply only to that extra, never to a plain install
            lines.append(line)
    return tuple(lines)


def requirement_on(distribution: str, requires: Iterable[str]) -> str | None:
    """The version specifier of the first requirement on ``distribution`` that applies, or ``None``.

    Written as ``packaging`` writes a specifier set (sorted, comma-separated), so that messages do not
    depend on which route read it.
    """
    target = canonical_name(distribution)
    for line in requires:
        match = _NAME.match(line)
        if match is None or canonical_name(match.group(1)) != target:
            continue
        rest = line[match.end():]
        plain = _PLAIN_SPECIFIERS.fullmatch(rest)
        comparisons = _ONE_SPECIFIER.findall(plain.group(1) or "") if plain is not None else []
        distinct = {(op, _release(version)) for op, version in comparisons}
        if plain is not None and len(distinct) == len(comparisons):  # packaging merges equal comparisons
            return ",".join(sorted(op + version for op, version in comparisons)) or None
        applies, specifier = _through_packaging(line, target)
        if applies:
            return specifier
    return None


def _through_packaging(line: str, target: str) -> tuple[bool, str | None]:
    """Whether a requirement ``packaging`` must read (extras, markers, pre-releases...) applies to a plain
    install of ``target``, and its specifier. An unparsable line does not apply."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return False, None
    if canonical_name(requirement.name) != target:
        return False, None
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        return False, None
    return True, str(requirement.specifier) or None


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier`` (pre-releases allowed), as ``packaging`` decides it."""
    plain = _plain_comparisons(specifier)
    if plain is not None and _RELEASE.fullmatch(version):
        installed = _release(version)
        return all(_compare(installed, op, _release(bound)) for op, bound in plain)
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(specifier).contains(version, prereleases=True)


def _plain_comparisons(specifier: str) -> list[tuple[str, str]] | None:
    parts = [part.strip() for part in specifier.split(",") if part.strip()]
    found = [_ONE_SPECIFIER.fullmatch(part) for part in parts]
    if not parts or any(match is None for match in found):
        return None
    return [(match.group(1), match.group(2)) for match in found if match is not None]


def _release(version: str) -> tuple[int, ...]:
    numbers = [int(part) for part in version.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _compare(left: tuple[int, ...], op: str, right: tuple[int, ...]) -> bool:
    outcomes: dict[str, Any] = {
        "==": left == right, "!=": left != right, ">=": left >= right,
        "<=": left <= right, ">": left > right, "<": left < right,
    }
    return bool(outcomes[op])
