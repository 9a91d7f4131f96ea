"""Reference solutions: static shape of every file (the DSLs are absent on CPU, so nothing here
imports a solution; the GPU run is benchmarks/check_solutions_gpu.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks import check_solutions_gpu as check_gpu
from engine.grading.rules.static import check_source
from problems.registry import get
from problems.solutions import compile_check
from problems.targets import ARCHS as TARGET_ARCHS
from problems.targets import declared_archs

SOLUTIONS = Path(__file__).resolve().parents[2] / "problems" / "solutions"
FILES = sorted(SOLUTIONS.glob("p[0-9][0-9]_*.py"))
DSL_IMPORTS = {"cute": "cutlass.cute", "tirx": "tvm.script.tirx"}


def _imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_the_priority_problems_have_both_dsls() -> None:
    stems = {f.stem for f in FILES}
    for problem_id in ("p28", "p25"):
        assert {f"{problem_id}_cute", f"{problem_id}_tirx"} <= stems


def test_every_problem_has_a_pair() -> None:
    by_problem: dict[str, set[str]] = {}
    for f in FILES:
        problem_id, dsl = f.stem.split("_", 1)
        by_problem.setdefault(problem_id, set()).add(dsl)
    assert by_problem, "no solution files found"
    assert {p: d for p, d in by_problem.items() if d != {"cute", "tirx"}} == {}


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_solution_passes_static_rules(path: Path) -> None:
    assert check_source(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_solution_defines_solve_with_the_problem_inputs(path: Path) -> None:
    problem_id, dsl = path.stem.split("_", 1)
    problem = get(problem_id)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    solve = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    assert len(solve) == 1
    params = [a.arg for a in solve[0].args.args]
    assert params == list(problem.inputs)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_solution_uses_its_own_dsl_only(path: Path) -> None:
    dsl = path.stem.split("_", 1)[1]
    assert dsl in DSL_IMPORTS
    imports = _imports(ast.parse(path.read_text(encoding="utf-8")))
    other = next(d for d in DSL_IMPORTS if d != dsl)
    assert DSL_IMPORTS[dsl] in imports
    assert not any(name.startswith(DSL_IMPORTS[other].split(".")[0]) for name in imports)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_solution_keeps_the_compile_check_convention(path: Path) -> None:
    dsl = path.stem.split("_", 1)[1]
    names = _module_names(ast.parse(path.read_text(encoding="utf-8")))
    assert ("_CACHE" if dsl == "cute" else "_EXE") in names


def test_scripts_list_the_same_files() -> None:
    assert compile_check.solution_files([]) == FILES
    assert check_gpu.solution_files([], None) == FILES
    only = check_gpu.solution_files(["p28"], "tirx")
    assert [f.stem for f in only] == ["p28_tirx"]


def test_check_gpu_summary_keeps_the_verdict_fields() -> None:
    feedback = {"verdict": "fail", "reason": "dsl.no_launch", "speedup": None, "extra": 1}
    row = check_gpu.summarize("p28_cute", feedback, 1.234)
    assert row["solution"] == "p28_cute"
    assert row["verdict"] == "fail"
    assert row["reason"] == "dsl.no_launch"
    assert row["wall_s"] == 1.2
    assert "extra" not in row


# code that uses WGMMA (CuTe's warpgroup MMA and Hopper helpers, TIRx's wgmma intrinsics)
HOPPER_ONLY = ("cute.nvgpu.warpgroup", "hopper_helpers", "T.ptx.wgmma", "T.cuda.wgmma")
# code that uses tcgen05 MMA / TMEM (CuTe's tcgen05 module, TIRx's tcgen05 PTX intrinsics)
BLACKWELL_ONLY = ("nvgpu import cpasync, tcgen05", "tcgen05.mma", "tcgen05.alloc")
ALL_FILES = FILES + sorted((SOLUTIONS / "variants").glob("p[0-9][0-9]_*_*.py"))


@pytest.mark.parametrize("path", ALL_FILES, ids=[f.stem for f in ALL_FILES])
def test_solution_declares_the_architectures_it_is_written_for(path: Path) -> None:
    archs = declared_archs(path.read_text(encoding="utf-8"))
    assert archs and set(archs) <= set(TARGET_ARCHS), archs
    source = path.read_text(encoding="utf-8")
    if any(use in source for use in HOPPER_ONLY):  # WGMMA does not exist on sm_100a
        assert "sm_100a" not in archs
    if any(use in source for use in BLACKWELL_ONLY):  # nor tcgen05 on sm_90a
        assert "sm_90a" not in archs


def test_each_problem_and_dsl_has_a_solution_for_each_arch() -> None:
    """On sm_100a, p52 has the tcgen05 variants (CuTe and TIRx) besides the two hybrids
    (quantization kernels, eager fp32 GEMM)."""
    covered = {
        (f.stem.split("_")[0], f.stem.split("_")[1], arch)
        for f in ALL_FILES
        for arch in declared_archs(f.read_text(encoding="utf-8")) or ()
    }
    wanted = {(f.stem.split("_")[0], f.stem.split("_")[1], a) for f in FILES for a in TARGET_ARCHS}
    assert wanted - covered == set()


def test_the_gpu_check_adds_the_variants_that_declare_the_gpus_arch() -> None:
    blackwell = {p.name for p in check_gpu.variant_files([], None, "sm_100a")}
    hopper = {p.name for p in check_gpu.variant_files([], None, "sm_90a")}
    assert {"p52_cute_tcgen05.py", "p52_tirx_tcgen05.py"} <= blackwell
    assert not any("tcgen05" in name for name in hopper)
    assert {p.name for p in check_gpu.variant_files(["p52"], "tirx", "sm_100a")} == {
        "p52_tirx_hybrid.py",
        "p52_tirx_tcgen05.py",
    }
