"""The runner's zone is exactly what goes into the submission's jail, and it imports nothing of
ours but its own files: the standard library, torch, numpy and the DSLs."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from engine.grading.judge.runner_proc import RUNNER_DIR, RUNNER_FILES, RUNNER_MAIN

ALLOWED_THIRD_PARTY = {"torch", "numpy", "cutlass", "tvm", "tvm_ffi", "cuda"}


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            own_zone = node.module == "engine.grading.runner" or node.module.startswith(
                "engine.grading.runner."
            )
            if not own_zone:  # a sibling by its package path is its own zone
                roots.add(node.module.split(".")[0])
    return roots


def test_the_jail_gets_every_file_of_the_runner_zone_and_nothing_else() -> None:
    on_disk = sorted(p.name for p in RUNNER_DIR.glob("*.py") if p.name != "__init__.py")
    assert list(RUNNER_FILES) == on_disk
    assert RUNNER_MAIN in RUNNER_FILES
    assert Path(__file__).resolve().parents[2] / "engine" / "grading" / "runner" == RUNNER_DIR


def test_runner_files_import_only_the_standard_library_torch_numpy_the_dsls_and_siblings() -> None:
    siblings = {name.removesuffix(".py") for name in RUNNER_FILES}
    for name in RUNNER_FILES:
        roots = _imported_roots(RUNNER_DIR / name)
        foreign = {
            root
            for root in roots
            if root not in sys.stdlib_module_names
            and root not in ALLOWED_THIRD_PARTY
            and root not in siblings
            and root != "__future__"
        }
        assert not foreign, f"{name} imports {sorted(foreign)}"


def test_the_zone_check_sees_a_foreign_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import aiohttp\nfrom problems.registry import get\n")
    assert {"aiohttp", "problems"} <= _imported_roots(planted)
