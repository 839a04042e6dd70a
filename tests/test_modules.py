"""The shape of the code base: no import cycle between modules, no module over the size limit."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support.source import SourceFile, source_files

MAX_LINES = 400
# A module that is a table of data (each line a declaration) may be longer; it says so in a comment of its own.
DATA_TABLE_MARK = "# data table:"
# Over the limit and split by other work of the same change (the accelerator families, the video package); remove
# each entry once its module is split. The test fails when an entry is no longer over the limit.
SPLIT_ELSEWHERE: set[str] = set()


def _runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import the module runs (top-level or in a function), without those under ``if TYPE_CHECKING:``."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending += node.orelse
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        pending += ast.iter_child_nodes(node)


def import_graph(sources: list[SourceFile]) -> dict[str, set[str]]:
    """Module → the farm's modules it imports (``from shared import jobs`` is ``shared.jobs``)."""
    modules = {s.module for s in sources}
    graph: dict[str, set[str]] = {s.module: set() for s in sources}
    for source in sources:
        for node in _runtime_imports(source.tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the package of this module
                    package = source.module.split(".")
                    if not source.path.name == "__init__.py":
                        package = package[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, base] if base else package)
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != source.module and not source.module.startswith(name + "."):
                    graph[source.module].add(name)  # a package's __init__ runs before its modules: no cycle
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph(list(source_files()))
    assert "shared.jobs" in graph["shared.control"] or "shared.lifecycle" in graph["shared.control"]
    assert not cycles(graph), f"import cycles: {cycles(graph)}"


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    a = SourceFile(__import__("pathlib").Path("shared/a.py"), "shared.a", ast.parse("from shared import b"))
    b = SourceFile(
        __import__("pathlib").Path("shared/b.py"), "shared.b", ast.parse("def f():\n    from shared.a import x")
    )
    c = SourceFile(
        __import__("pathlib").Path("shared/c.py"), "shared.c",
        ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shared import a"),
    )  # fmt: skip
    assert cycles(import_graph([a, b, c])) == [["shared.a", "shared.b"]]


def test_no_module_over_the_size_limit() -> None:
    over = {}
    for source in source_files():
        text = source.path.read_text()
        lines = text.count("\n")
        if lines > MAX_LINES and DATA_TABLE_MARK not in text:
            over[source.name] = lines
    assert set(over) <= SPLIT_ELSEWHERE, f"modules over {MAX_LINES} lines: {sorted(set(over) - SPLIT_ELSEWHERE)}"
    assert set(over) == SPLIT_ELSEWHERE, f"split now, take them off SPLIT_ELSEWHERE: {SPLIT_ELSEWHERE - set(over)}"
