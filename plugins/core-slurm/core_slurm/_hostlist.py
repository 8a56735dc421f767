"""SLURM hostlist expressions, expanded the way ``scontrol show hostnames`` does.

A hostlist is a list of items separated by commas or whitespace outside brackets; an item is literal
text with bracketed ranges, ``node[001-004,010]``, where a range keeps the width of its lower bound
(``[08-10]`` gives ``08 09 10``, ``[8-10]`` gives ``8 9 10``). Several bracketed groups in one item
(``rack[1-2]-node[3-4]``) combine as a product, the last group varying fastest. Duplicates are kept.
Text after the last bracket (``a[1-2]b``) is accepted too, although SLURM itself refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Final, Protocol

from core import ConfigurationError

_RANGE: Final = re.compile(r"(\d+)(?:-(\d+))?")
_BRACKETED: Final = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(expression: str) -> list[str]:
    """Every host name of ``expression``, in order: ``"gpu[1-2],cpu7"`` -> ``["gpu1", "gpu2", "cpu7"]``."""
    return list(iter_hostlist(expression))


def first_host(expression: str) -> str:
    """The first host name of ``expression`` without expanding the rest (``node[1-100000]`` is cheap)."""
    for host in iter_hostlist(expression):
        return host
    raise ConfigurationError(f"The SLURM hostlist {expression!r} names no host; expected e.g. 'node[1-4]'.")


def iter_hostlist(expression: str) -> Iterator[str]:
    """The host names of ``expression`` one at a time; a malformed expression raises before any is yielded."""
    items = [_parse_item(expression, item) for item in _split_items(expression)]
    for groups in items:
        yield from _product(groups)


def _split_items(expression: str) -> list[str]:
    """Split at commas and whitespace that are not inside brackets."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in expression:
        if char == "[":
            depth += 1
            if depth > 1:
                raise _malformed(expression, "brackets cannot nest")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _malformed(expression, "']' without '['")
        if depth == 0 and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth != 0:
        raise _malformed(expression, "'[' without ']'")
    if current:
        items.append("".join(current))
    return items


class _Group(Protocol):
    """One part of an item: literal text (one choice) or a bracket (one choice per number)."""

    def __len__(self) -> int: ...

    def at(self, index: int) -> str: ...


class _Literal:
    def __init__(self, text: str) -> None:
        self._text = text

    def __len__(self) -> int:
        return 1

    def at(self, index: int) -> str:
        return self._text


class _Ranges:
    """The numbers of one bracket, ``001-004,010``, as zero-padded strings, computed on demand."""

    def __init__(self, expression: str, spec: str) -> None:
        self._spans: list[tuple[int, int, int]] = []
        for part in spec.split(","):
            match = _RANGE.fullmatch(part.strip())
            if match is None:
                raise _malformed(expression, f"[{spec}] holds {part!r}, not a number or a range like 1-4")
            low_text, high_text = match.group(1), match.group(2)
            low = int(low_text)
            high = int(high_text) if high_text is not None else low
            if high < low:
                raise _malformed(expression, f"the range {part!r} runs backwards")
            self._spans.append((low, high, len(low_text)))

    def __len__(self) -> int:
        return sum(high - low + 1 for low, high, _ in self._spans)

    def at(self, index: int) -> str:
        for low, high, width in self._spans:
            size = high - low + 1
            if index < size:
                return str(low + index).zfill(width)
            index -= size
        raise IndexError(index)


def _parse_item(expression: str, item: str) -> list[_Group]:
    """An item as the groups to combine, in order."""
    pieces = _BRACKETED.split(item)
    # re.split with one capturing group alternates: literal, bracket content, literal, ...
    groups: list[_Group] = []
    for index, piece in enumerate(pieces):
        if index % 2 == 1:
            groups.append(_Ranges(expression, piece))
        elif piece:
            groups.append(_Literal(piece))
    return groups


def _product(groups: Sequence[_Group]) -> Iterator[str]:
    """Concatenations of one element per group, the last group varying fastest (lazy, unlike itertools)."""
    if not groups:
        yield ""
        return
    head, rest = groups[0], groups[1:]
    for index in range(len(head)):
        prefix = head.at(index)
        for suffix in _product(rest):
            yield prefix + suffix


def _malformed(expression: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"Cannot read the SLURM hostlist {expression!r}: {why}. Expected host names and bracketed ranges "
        f"separated by commas, e.g. 'node[001-004,010],gpu-a[1-2]'."
    )
