"""Sphinx (reST) markup of the docstrings, as Markdown: the roles and, for generated pages, the field lists.

The docstrings use Sphinx's markup (``:param x:``, ``:class:`Lite```); the site and docs/hooks.md are Markdown.
``roles_to_markdown`` turns each role into a code span, or, given a resolver, into an optional cross-reference
that links where the target is documented on the site (``scripts/griffe_sphinx_roles.py`` does this for the API
pages); ``fields_to_markdown`` turns ``:param x:`` / ``:return:`` / ``:raises X:`` lines into a list
(``scripts/gen_hooks_doc.py``; on the API pages mkdocstrings' Sphinx parser reads the fields itself).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# :class:`X`, :py:meth:`~a.B.c`, :func:`title <a.b>`, :class:`!X` (no link).
ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|attr|data|exc|mod|obj|const|type):`(?P<body>[^`]+)`")
FIELD = re.compile(
    r"^(?P<indent>[ \t]*):(?P<kind>param|parameter|arg|return|returns|raises|raise)(?: (?P<name>[^:]+))?:(?P<text>.*)$"
)


def _target_and_title(body: str) -> tuple[str, str, bool]:
    """The role's target, the text shown, and whether it may link."""
    explicit = re.fullmatch(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", body)
    if explicit:
        return explicit.group("target").lstrip("~!"), explicit.group("title"), True
    linkable = not body.startswith("!")
    target = body.lstrip("~!")
    title = target.rsplit(".", 1)[-1] if body.lstrip("!").startswith("~") else target
    return target, title, linkable


def roles_to_markdown(text: str, resolve: Callable[[str], str | None] | None = None) -> str:
    """Every Sphinx role in ``text`` as a code span; with ``resolve`` (a target -> its full path, or None), as an
    optional mkdocs-autorefs cross-reference to that path (a plain code span where the site does not document it)."""

    def replace(match: re.Match[str]) -> str:
        target, title, linkable = _target_and_title(match.group("body"))
        shown = f"`{title}`"
        path = resolve(target) if resolve is not None and linkable else None
        return f'<autoref identifier="{path}" optional>{shown}</autoref>' if path else shown

    return ROLE.sub(replace, text)


def fields_to_markdown(text: str) -> str:
    """``:param x: ...`` / ``:return: ...`` / ``:raises X: ...`` (each with its indented continuation lines) as a
    Markdown list: ``- `x`: ...``, ``- returns: ...``, ``- raises `X`: ...``."""
    out: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        field = FIELD.match(lines[index])
        if field is None:
            out.append(lines[index])
            index += 1
            continue
        words = [field.group("text").strip()]
        indent = len(field.group("indent"))
        index += 1
        while index < len(lines) and lines[index].strip() and len(lines[index]) - len(lines[index].lstrip()) > indent \
                and not FIELD.match(lines[index]):
            words.append(lines[index].strip())
            index += 1
        kind, name, body = field.group("kind"), (field.group("name") or "").strip(), " ".join(words)
        if kind in {"param", "parameter", "arg"}:
            label = f"`{name.split()[-1]}`"
        elif kind in {"return", "returns"}:
            label = "returns"
        else:
            label = f"raises `{name}`" if name else "raises"
        if out and out[-1].strip() and not out[-1].lstrip().startswith("- "):
            out.append("")  # Markdown starts a list only after a blank line
        out.append(f"{field.group('indent')}- {label}: {body}")
    return "\n".join(out)


def to_markdown(text: str) -> str:
    """A whole docstring as Markdown, for pages written without mkdocstrings (docs/hooks.md)."""
    return roles_to_markdown(fields_to_markdown(text))
