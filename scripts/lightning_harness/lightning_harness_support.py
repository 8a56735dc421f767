"""What the harness puts under Lightning's tests: the ``lightning`` alias and lazy module-level imports.

Imported by the harness's conftest before any test module, so that ``import lightning.pytorch`` in a test of
Lightning 2.6 reaches ``core.lightning.pytorch``, and a module-level ``from lightning.x import Name`` that core
refuses binds a placeholder that raises the refusal where the name is used (one refused name fails only the
tests that use it, not the whole file).
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

import core.lightning

# The alias is core's supported one (core.lightning.install_alias, also what the core-lightning-alias distribution
# calls): a real ``lightning`` installed here is never used.
install_alias = core.lightning.install_alias


class RefusedImport:
    """Stands for a name whose module-level import failed; any use raises that import's error."""

    def __init__(self, statement: str, error: BaseException) -> None:
        object.__setattr__(self, "_statement", statement)
        object.__setattr__(self, "_error", error)

    def _raise(self, *args: Any, **kwargs: Any) -> Any:
        error: BaseException = object.__getattribute__(self, "_error")
        statement: str = object.__getattribute__(self, "_statement")
        raise ImportError(f"module-level `{statement}` failed: {type(error).__name__}: {error}") from error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        # `Refused.MEMBER` in a module-level parametrize list stays deferred until a test uses it
        statement = object.__getattribute__(self, "_statement")
        return RefusedImport(f"{statement} (.{name})", object.__getattribute__(self, "_error"))

    def __bool__(self) -> bool:
        return False  # a refused `_X_AVAILABLE` flag reads as "not available"

    __call__ = _raise
    __mro_entries__ = _raise
    __iter__ = _raise
    __getitem__ = _raise
    __enter__ = _raise
    __instancecheck__ = _raise
    __subclasscheck__ = _raise
    __eq__ = _raise
    __hash__ = object.__hash__  # parametrize ids hash their values

    def __repr__(self) -> str:
        return f"<refused import: {object.__getattribute__(self, '_statement')}>"


def lazy_import(namespace: dict[str, Any], statement: str) -> None:
    """Run one module-level import ``statement`` into ``namespace``, a name at a time; bind failures lazily."""
    node = ast.parse(statement).body[0]
    if isinstance(node, ast.ImportFrom):
        for alias in node.names:
            one = ast.unparse(ast.ImportFrom(module=node.module, names=[alias], level=node.level))
            _run(namespace, one, alias.asname or alias.name)
    else:
        assert isinstance(node, ast.Import)
        for alias in node.names:
            bound = alias.asname or alias.name.partition(".")[0]
            _run(namespace, ast.unparse(ast.Import(names=[alias])), bound)


def _run(namespace: dict[str, Any], statement: str, bound: str) -> None:
    try:
        exec(statement, namespace)
    except Exception as error:
        namespace[bound] = RefusedImport(statement, error)


def make_imports_lazy(source: str) -> str:
    """``source`` with each module-level import (but ``__future__``) run through :func:`lazy_import`.

    Line numbers are kept: a statement of N lines becomes one line and N - 1 blank ones.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for node in reversed(tree.body):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        assert node.end_lineno is not None
        first, last = node.lineno - 1, node.end_lineno
        if any(";" in line for line in lines[first:last]) or lines[first][: node.col_offset].strip() != "":
            continue
        # through the plugin module, which a process started by ddp_spawn imports here too (alias included)
        call = (f"__import__('lightning_harness_plugin').lightning_harness_support.lazy_import(globals(), "
                f"{ast.unparse(node)!r})\n")
        lines[first:last] = [call] + ["\n"] * (last - first - 1)
    return "".join(lines)




@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> Any:
    """A ``KeyboardInterrupt`` out of a test (Ctrl-C that ``fit`` did not handle) fails that test, not the session."""
    try:
        return (yield)
    except KeyboardInterrupt as interrupt:
        raise RuntimeError("KeyboardInterrupt escaped the test: Lightning's fit handles Ctrl-C") from interrupt
