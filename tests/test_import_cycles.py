"""No import cycle in ``core``, annotations included: the graph of every import in ``core`` (module level, inside
functions and under ``TYPE_CHECKING`` alike, as grimp reads them) has no cycle, so each module can be read, typed
and tested after the modules it names and none of them names it back.

A cycle is reported as the shortest path round it, each step with its file's line (``a -> b (line 12: from b
import X)``): break it by moving what both sides need into a module below both, or by typing the upper side
against a protocol that lives below it (``core.module.TrainerView`` is the model).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import grimp
import pytest


def strongly_connected(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The groups of two or more modules that import one another, directly or not (Tarjan's algorithm)."""
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in sorted(graph.modules)}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []
    for root in edges:
        if root in order:
            continue
        work = [(root, iter(edges[root]))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            following = next(pending, None)
            if following is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == order[module]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(frozenset(group))
            elif following not in order:
                order[following] = low[following] = len(order)
                stack.append(following)
                on_stack.add(following)
                work.append((following, iter(edges[following])))
            elif following in on_stack:
                low[module] = min(low[module], order[following])
    return groups


def shortest_cycle(graph: grimp.ImportGraph, group: Iterable[str]) -> list[str]:
    """The shortest cycle through the first module of ``group`` (sorted), each step with the import that makes it."""
    members = set(group)
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for following in sorted(graph.find_modules_directly_imported_by(module) & members):
            if following == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                path.reverse()
                return [_step(graph, a, b) for a, b in zip(path, [*path[1:], start], strict=True)]
            if following not in came_from:
                came_from[following] = module
                queue.append(following)
    raise AssertionError(f"no cycle through {start}")  # a strongly connected group always has one


def _step(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    where = f" (line {details[0]['line_number']}: {details[0]['line_contents']})" if details else ""
    return f"{importer} -> {imported}{where}"


def cycle_report(graph: grimp.ImportGraph) -> list[str]:
    """One entry per group of modules that import one another: its size and shortest cycle, step by step."""
    return [f"import cycle among {len(group)} modules:\n  " + "\n  ".join(shortest_cycle(graph, group))
            for group in strongly_connected(graph)]


def test_core_has_no_import_cycle_type_checking_imports_included() -> None:
    graph = grimp.build_graph("core", exclude_type_checking_imports=False)
    assert len(graph.modules) > 150  # the whole package was read
    problems = cycle_report(graph)
    assert not problems, "\n".join(problems)


def test_a_cycle_through_an_annotation_is_found_and_named() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="from pkg.b import B")
    graph.add_import(importer="pkg.b", imported="pkg.c", line_number=5, line_contents="from pkg.c import C")
    graph.add_import(importer="pkg.c", imported="pkg.a", line_number=9, line_contents="from pkg.a import A  # typing")
    graph.add_import(importer="pkg", imported="pkg.a", line_number=1, line_contents="from pkg.a import A")
    assert cycle_report(graph) == [
        "import cycle among 3 modules:\n"
        "  pkg.a -> pkg.b (line 3: from pkg.b import B)\n"
        "  pkg.b -> pkg.c (line 5: from pkg.c import C)\n"
        "  pkg.c -> pkg.a (line 9: from pkg.a import A  # typing)"
    ]
    graph.remove_import(importer="pkg.c", imported="pkg.a")
    assert cycle_report(graph) == []
    with pytest.raises(AssertionError, match=r"no cycle through pkg\.a"):
        shortest_cycle(graph, {"pkg.a", "pkg.b"})
