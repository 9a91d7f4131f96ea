"""The code's shape limits (docs/architecture.md): no module of the project's packages over
500 lines and no function of ``engine`` over 80 lines.

Problem definitions and reference solutions (``problems/<family>/``, ``problems/solutions/``)
are kernels written as one listing each and are left out, as the limits say."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "engine", "screens", "storage", "problems")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            inside = path.relative_to(ROOT / "problems").parts if package == "problems" else ()
            if len(inside) > 1:  # problems/<family>/... and problems/solutions/...: listings
                continue
            found.append(path)
    return found


def test_the_scan_sees_the_packages() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"engine/scheduler.py", "app/tui.py", "problems/registry.py"} <= names
    assert not any(n.startswith("problems/solutions/") for n in names)


def test_no_module_over_500_lines() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_engine_function_over_80_lines() -> None:
    long = {}
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = lines
    assert long == {}, f"engine functions over {MAX_FUNCTION_LINES} lines: {long}"
