"""engine/grading/judge imports no module of its own in a circle (a type-only import counts:
a circle there still ties the two modules' load order together)."""

from __future__ import annotations

import ast
from pathlib import Path

JUDGE = Path(__file__).resolve().parents[2] / "engine" / "grading" / "judge"
PACKAGE = "engine.grading.judge"


def imports_within(path: Path, names: set[str]) -> set[str]:
    """The sibling modules ``path`` imports, anywhere in it (functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[3])
            elif node.module == PACKAGE:
                found.update(alias.name for alias in node.names)
    return found & names


def a_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle among ``edges``, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (circle := visit(nxt, [*path, nxt])):
                return circle
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (circle := visit(start, [start])):
            return circle
    return None


def test_the_search_finds_a_circle() -> None:
    assert a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert a_circle({"a": {"b"}, "b": set()}) is None


def test_the_judge_package_has_no_import_circle() -> None:
    modules = {p.stem: p for p in JUDGE.glob("*.py") if p.stem != "__init__"}
    edges = {name: imports_within(path, set(modules)) for name, path in modules.items()}
    assert "job" in edges and "judge" in edges["job"]  # the scan sees the imports
    assert a_circle(edges) is None, a_circle(edges)
