"""Variant reference solutions (``problems/solutions/variants/pNN_<dsl>_<what>.py``): the same
static conventions as the main files; and, where the DSLs are installed, every main solution
and variant compiled on the CPU for each architecture its ``ARCHS`` declares (sm_90a, sm_100a).
The registry and the GPU batch list the main files only."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.grading.rules.static import check_source
from problems.registry import get
from problems.solutions import compile_check
from problems.targets import ARCHS, declared_archs

REPO = Path(__file__).resolve().parents[2]
VARIANTS = sorted((REPO / "problems" / "solutions" / "variants").glob("p[0-9][0-9]_*_*.py"))
DSL_ROOTS = {"cute": "cutlass", "tirx": "tvm"}
IDS = [f.stem for f in VARIANTS]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _imported_roots(tree: ast.Module) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _run(code_or_args: list[str], unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["CUTE_DSL_ARCH"] = "sm_90a"
    return subprocess.run(
        [sys.executable, *code_or_args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_variants_exist_and_stay_out_of_the_main_lists() -> None:
    assert "p36_cute_tvmffi" in IDS
    assert not set(VARIANTS) & set(compile_check.solution_files([]))


@pytest.mark.parametrize("path", VARIANTS, ids=IDS)
def test_variant_follows_the_solution_conventions(path: Path) -> None:
    problem_id, dsl, _ = path.stem.split("_", 2)
    source = path.read_text(encoding="utf-8")
    assert check_source(source) == []
    tree = ast.parse(source)
    solve = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    assert len(solve) == 1
    assert [a.arg for a in solve[0].args.args] == list(get(problem_id).inputs)
    roots = _imported_roots(tree)
    assert DSL_ROOTS[dsl] in roots and not roots & (set(DSL_ROOTS.values()) - {DSL_ROOTS[dsl]})
    assert ("_CACHE" if dsl == "cute" else "_EXE") in ast.unparse(tree)
    assert (path.parents[1] / f"{problem_id}_{dsl}.py").is_file()  # the variant of a solution


TVMFFI_CALL = """
import sys
from problems.registry import get
from problems.solutions.compile_check import load
problem = get("p36")
solution = load(__import__("pathlib").Path(sys.argv[1]))
try:
    solution.solve(*problem.module.make_inputs(0, "cpu", problem.smoke))
except Exception as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
print(type(next(iter(solution._CACHE.values()))).__name__)
"""


@pytest.mark.slow
@pytest.mark.skipif(not _installed("cutlass.cute"), reason="CuTe DSL is not installed here")
def test_p36_tvmffi_call_accepts_solve_arguments_up_to_the_gpu() -> None:
    """Unstubbed: TVM-FFI checks every argument before it needs CUDA, so on a CPU the call
    must fail only for want of a driver, never for a mismatched tensor or scalar."""
    path = REPO / "problems/solutions/variants/p36_cute_tvmffi.py"
    result = _run(["-c", TVMFFI_CALL, str(path)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cudaErrorInsufficientDriver" in result.stdout, result.stdout
    assert "Mismatched" not in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("TVMFFIJitCompiledFunction")


@pytest.mark.slow
@pytest.mark.skipif(
    not (_installed("cutlass.cute") and _installed("tvm")), reason="the DSLs are not installed"
)
def test_every_solution_compiles_for_each_architecture_it_declares() -> None:
    """Every main solution and variant, for sm_90a and for sm_100a, in one process per arch
    (the two run at once): CuTe to cubins, TIRx through NVRTC with the pip CUDA headers (no
    CUDA_PATH given). A file is compiled for exactly the archs its ARCHS names."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_PATH"}
    procs = {
        arch: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "problems.solutions.compile_check",
                "--arch",
                arch,
                "--variants",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for arch in ARCHS
    }
    files = compile_check.solution_files([], variants=True)
    for arch, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
        compiled = re.findall(r"^ok   (p\d\d_\w+\.py): [1-9]", out, re.M)
        skipped = re.findall(r"^skip (p\d\d_\w+\.py): does not declare", out, re.M)
        declaring = [f.name for f in files if arch in declared_archs(f.read_text())]
        assert sorted(compiled) == sorted(declaring), arch
        assert sorted(compiled + skipped) == sorted(f.name for f in files)
    assert len(files) == 14 + len(VARIANTS)


def test_compile_check_skips_files_that_do_not_declare_the_arch() -> None:
    """The reference p52 GEMMs (WGMMA) are left out of an sm_100a run by their ARCHS."""
    result = _run(["-m", "problems.solutions.compile_check", "--arch", "sm_100a", "p52"])
    assert result.returncode == 0, result.stdout[-3000:]
    assert "skip p52_cute.py: does not declare sm_100a" in result.stdout
    assert "skip p52_tirx.py: does not declare sm_100a" in result.stdout
