"""The task's ``compile_check`` command: shipped in every build, fails loudly on bad kernels.

The successful compiles of both DSLs inside the sandbox, and a B200 task's (the Blackwell
kernel compiles for sm_100a, the Hopper one fails naming WGMMA), are covered by
tests/attempts/test_compile_check_attempt.py; here the script runs on the host.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tasks.builder import build_task
from engine.tasks.compile_check_script import COMPILE_CHECK_PATH

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


needs_cute = pytest.mark.skipif(
    not _installed("cutlass.cute"), reason="cutlass.cute is not installed (make install adds it)"
)


def _run(task_env: Path, solution: str) -> subprocess.CompletedProcess[str]:
    (task_env / "solution.py").write_text(solution)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_PATH", "CUTE_DSL_ARCH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(
        [str(task_env / COMPILE_CHECK_PATH)],
        cwd=task_env,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_every_build_ships_compile_check_and_names_it(tmp_path: Path, dsl: str) -> None:
    task = build_task("p28", dsl, tmp_path)
    script = task.path / "environment" / COMPILE_CHECK_PATH
    assert os.access(script, os.X_OK)
    assert "compile_check [FILE]" in script.read_text()
    assert "`compile_check`" in (task.path / "instruction.md").read_text()


@pytest.mark.slow
@needs_cute
def test_a_compile_error_fails_with_the_traceback(tmp_path: Path) -> None:
    env = build_task("p28", "cute", tmp_path).path / "environment"
    good = (FIXTURES / "p28_cute_tiny.py").read_text()
    bad = good.replace("gc[i] = ga[i] + gb[i]", "gc[i] = ga[i] + gb[i] + undefined_name")
    assert bad != good
    result = _run(env, bad)
    assert result.returncode == 1
    assert "compile_check: FAILED for solution.py (cute, sm_90a)" in result.stdout
    assert "undefined_name" in result.stderr


@pytest.mark.slow
@needs_cute
def test_a_solution_that_compiles_no_kernel_fails(tmp_path: Path) -> None:
    env = build_task("p28", "cute", tmp_path).path / "environment"
    eager = "import cutlass.cute\n\ndef solve(x, r, w):\n    return x + r\n"
    result = _run(env, eager)
    assert result.returncode == 1
    assert "compiled no kernel" in result.stderr


SOLUTIONS = Path(__file__).resolve().parents[2] / "problems" / "solutions"


@pytest.mark.slow
@pytest.mark.skipif(not _installed("tvm"), reason="TVM is not installed (make install adds it)")
def test_a_tirx_wgmma_kernel_fails_for_sm100a_naming_the_feature(tmp_path: Path) -> None:
    """TIRx: the source asks for its device's arch (sm_90a without a GPU); compile_check
    builds for the task's sm_100a and NVRTC refuses the wgmma instructions."""
    env = build_task("p52", "tirx", tmp_path, gpu="b200").path / "environment"
    result = _run(env, (SOLUTIONS / "p52_tirx.py").read_text())
    assert result.returncode == 1
    assert "wgmma" in result.stderr and "sm_100a" in result.stderr
    assert "(tirx, sm_100a): WGMMA (warpgroup MMA) is a Hopper (sm_90a) feature" in result.stdout


def test_the_failure_line_names_the_missing_feature_only_when_it_is_involved() -> None:
    from engine.tasks.compile_check_script import render_compile_check_script

    script: dict[str, object] = {"__name__": "compile_check", "__file__": "/w/bin/compile_check"}
    exec(render_compile_check_script("sm_100a"), script)
    diagnose = script["diagnose"]
    assert callable(diagnose)
    failure = "DSLUserCodeError: expects arch to be sm_90a, but got sm_100a"
    assert diagnose("sm_100a", failure, "") == (
        "WGMMA (warpgroup MMA) is a Hopper (sm_90a) feature: sm_100a does not have it (it has "
        "tcgen05 MMA (UMMA) with TMEM instead)"
    )
    assert diagnose("sm_100a", "NameError: x", "a summary, no tensor cores") is None
    assert diagnose("sm_90a", "NameError: x", "a summary, no tensor cores") is None
    blackwell = diagnose("sm_90a", "NameError: x", "tmem = TmemAllocator(...)")
    assert blackwell.startswith("(the file also uses tcgen05 MMA (UMMA) and TMEM")  # type: ignore[union-attr]
