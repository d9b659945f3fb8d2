"""The package's shape, as rules a change cannot silently break: no import cycle between its
modules (and none hidden behind an import inside a function), no function longer than a
screen, and the whole source within its size budget."""

from __future__ import annotations

import ast
from pathlib import Path

import flodl_ddp

SRC = Path(flodl_ddp.__file__).parent
MAX_FUNCTION_LINES = 60
MAX_SOURCE_LINES = 8000  # lower this as the source shrinks, never raise it


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SRC.glob("*.py"))}


def _own(node: ast.ImportFrom) -> list[str]:
    """The flodl_ddp modules an ``import`` statement names (``from ._x import y``)."""
    if node.level == 1 and node.module:
        return [node.module.split(".")[0]]
    if node.level == 0 and node.module and node.module.startswith("flodl_ddp."):
        return [node.module.split(".")[1]]
    return []


def _edges(tree: ast.Module) -> tuple[set[str], list[tuple[int, str]]]:
    """The modules ``tree`` imports, and those it imports inside a function (line, module)."""
    edges: set[str] = set()
    hidden: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    hidden += [(inner.lineno, m) for m in _own(inner)]
        if isinstance(node, ast.ImportFrom):
            edges.update(_own(node))
    return edges, hidden


def test_no_import_cycle_between_the_modules() -> None:
    graph = {name: _edges(tree)[0] for name, tree in _modules().items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, m, n]))
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_no_module_of_the_package_is_imported_inside_a_function() -> None:
    """Such an import hides a cycle; imports inside functions are for optional or heavy
    dependencies only (torchft, safetensors, the monitor)."""
    hidden = [
        f"{name}.py:{line} imports {mod}"
        for name, tree in _modules().items()
        for line, mod in _edges(tree)[1]
    ]
    assert not hidden, hidden


def test_no_function_is_longer_than_a_screen() -> None:
    long = [
        f"{name}.py:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_the_source_stays_within_its_budget() -> None:
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.glob("*.py"))
    assert lines <= MAX_SOURCE_LINES, f"flodl-ddp source: {lines} lines, budget {MAX_SOURCE_LINES}"
