"""A griffe extension for the documentation site: the docstrings' Sphinx roles become cross-references.

mkdocstrings' ``docstring_style: sphinx`` reads the field lists (``:param x:``, ``:return:``) but prints roles such
as ``:class:`Lite``` as they are written. Once griffe has loaded a package, this rewrites each docstring's roles
(``scripts/sphinx_roles.py``) into optional mkdocs-autorefs references: a name is resolved in the scope of the
object whose docstring holds it, and links to its page where the site documents it, else shows as code.
Configured in mkdocs.yml (``extensions:`` of the python handler).

The names in signatures, annotations and class bases are shown by their public path too (:class:`PublicPaths`):
``Bases: core.CoreError``, not the ``core._errors.CoreError`` where it is defined; a name with no public path
shows as its bare name. Nothing changes at run time (``__module__``, ``repr``, pickling stay as they are).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sphinx_roles import roles_to_markdown


def _public(path: str, collection: Any, package: str) -> str:
    """``path`` through a public re-export where one exists: ``core.toolkit.strategies._parallel.ParallelStrategy.x``
    becomes ``core.toolkit.strategies.ParallelStrategy.x`` (the page documents it there; the private path is also
    where every subclass that inherits ``x`` is registered, so it would not say which one to link to). Of several
    re-exports, the one in ``package`` (the referring docstring's) is preferred, then the shortest."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = collection[".".join(parts[:end])]
            aliases = list(found.aliases)
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        public = sorted((alias for alias in aliases if not any(part.startswith("_") for part in alias.split("."))),
                        key=lambda alias: (alias.split(".")[0] != package, len(alias)))
        if public:
            return ".".join([public[0], *parts[end:]])
    return path


def _is_private(path: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in path.split("."))


def _shown(path: str, collection: Any, package: str) -> str:
    """``path`` as the site shows it: its public path, else (a private name without one) its bare name."""
    public = _public(path, collection, package)
    return public.rpartition(".")[2] if _is_private(public) else public


def _resolver(obj: griffe.Object | griffe.Alias) -> Any:
    collection = obj.modules_collection
    package = obj.path.split(".")[0]

    def resolve(target: str) -> str | None:
        head, _, rest = target.partition(".")
        if target.startswith(("core.", "core_")) or (rest and head in collection):
            return _public(target, collection, package)  # already a full path
        scope: griffe.Object | griffe.Alias | None = obj
        while scope is not None:
            try:
                found = scope.resolve(head)
            except (griffe.NameResolutionError, griffe.AliasResolutionError, KeyError, AttributeError):
                scope = scope.parent
                continue
            public = _public(f"{found}.{rest}" if rest else found, collection, package)
            return None if _is_private(public) else public  # undocumented: shown as code, without its path
        return None

    return resolve


class _PublicScope:
    """The scope of a name in a signature, resolving it to the path the site shows (see :func:`_shown`).

    Stands in for a griffe object as an ``ExprName``'s ``parent``, whose ``canonical_path`` and ``reference_path``
    (the link and its title) are ``parent.resolve(name)``. It resolves when the page is rendered, once every
    package is loaded and every re-export known; anything else is asked of the object itself."""

    def __init__(self, scope: Any, member: str | None) -> None:
        self._scope = scope
        self._member = member
        self.members: dict[str, Any] = {}  # the expression looks its member up here: this scope itself

    def resolve(self, name: str) -> str:
        scope = self._scope.members.get(self._member, self._scope) if self._member else self._scope
        path: str = scope.resolve(name)
        return _shown(path, self._scope.modules_collection, self._scope.path.split(".")[0])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scope, name)


def _expressions(obj: griffe.Object) -> list[Any]:
    found: list[Any] = []
    if isinstance(obj, griffe.Class):
        found += obj.bases
    if isinstance(obj, griffe.Function):
        found += [obj.returns, *(parameter.annotation for parameter in obj.parameters)]
        found += [parameter.default for parameter in obj.parameters]
    if isinstance(obj, griffe.Attribute):
        found += [obj.annotation, obj.value]
    return [expression for expression in found if isinstance(expression, griffe.Expr)]


class PublicPaths(griffe.Extension):
    """The names in every signature, annotation and list of bases are resolved to their public paths."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for expression in _expressions(obj):
            for name in expression.iterate(flat=True):
                if isinstance(name, griffe.ExprName) and isinstance(name.parent, (griffe.Object, griffe.Alias)):
                    name.parent = _PublicScope(name.parent, name.member)  # type: ignore[assignment]
                    name.member = None


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of a loaded object into (optional) cross-references."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = roles_to_markdown(obj.docstring.value, _resolver(obj))

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self.on_object(obj=pkg, loader=loader)  # a top-level package is not among the objects on_object sees


def _hook_summaries() -> dict[str, str]:
    """Each hook's name -> the first paragraph of its specification's docstring (core.hookspecs imports no torch)."""
    import inspect

    from core import hookspecs
    from core._markers import PROJECT_NAME

    return {
        name: (inspect.getdoc(function) or "").split("\n\n", 1)[0]
        for name, function in vars(hookspecs).items()
        if inspect.isfunction(function) and hasattr(function, f"{PROJECT_NAME}_spec")
    }


class HookDocstrings(griffe.Extension):
    """A plugin's hook implementation without a docstring of its own is documented by its specification: the
    hook's name (linked to core.hookspecs) and the first paragraph of the contract's docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.summaries = _hook_summaries()

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        summary = self.summaries.get(obj.name)
        if summary is None or not obj.is_function or obj.parent is None or not obj.parent.is_class:
            return
        if obj.docstring is None or not obj.docstring.value.strip():
            link = f'<autoref identifier="core.hookspecs.{obj.name}" optional>`{obj.name}`</autoref>'
            text = roles_to_markdown(summary, _resolver(obj))
            obj.docstring = griffe.Docstring(f"Implements the hook {link}: {text}", parent=obj)
