"""The ``docs/launch.md`` page: shipped in every build, pointed to by the instruction, and its
code, as rendered for the H200 and for the B200, compiles for that GPU's arch (sm_90a,
sm_100a) on the CPU (each block is run unstubbed up to where a GPU is needed: the arguments are
accepted, then CUDA is missing)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tasks import launch_guide
from engine.tasks.builder import build_task
from engine.tasks.dsls import dsl_info
from problems.targets import TARGETS

DSL_MODULES = {"cute": "cutlass.cute", "tirx": "tvm.script.tirx"}
GPU_NEEDED = {"cute": "cudaErrorInsufficientDriver", "tirx": "Mismatched X.device_type"}

# Runs one code block: import it, call scale() on CPU tensors, report how the call ended; for
# TIRx also NVRTC-compile each built module's CUDA code for the arch (headers as compile_check
# finds them).
HARNESS = """
import importlib.util, sys
from engine.tasks.compile_check_script import render_compile_check_script
check = {"__name__": "compile_check", "__file__": sys.argv[2]}
exec(render_compile_check_script(), check)
check["ensure_cuda_path"]()
built = []
if sys.argv[1] == "tirx":
    import tvm
    real = tvm.compile
    tvm.compile = lambda *a, **k: built.append(real(*a, **k)) or built[-1]
spec = importlib.util.spec_from_file_location("snippet", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
import torch
for _ in range(2):  # the second call takes the cached path
    try:
        module.scale(torch.ones(1000), 2.0)
        print("RETURNED")
    except Exception as exc:
        print("RAISED", type(exc).__name__, str(exc).strip().splitlines()[0])
for exe in built:
    from tvm.support import nvcc
    for dev in exe.mod.imports:
        cubin = nvcc.compile_cuda(dev.inspect_source(), target_format="cubin", arch=sys.argv[3])
        print("CUBIN", len(cubin))
"""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_page_has_one_complete_module_and_the_measured_costs(dsl: str) -> None:
    page = launch_guide.render_launch_guide(dsl_info(dsl))
    (code,) = launch_guide.guide_code(dsl)
    assert "def scale(x: torch.Tensor, alpha: float)" in code
    assert "µs" in page and code in page
    if dsl == "cute":
        assert 'options="--enable-tvm-ffi"' in code and "fn(x, y, alpha)" in code
        assert all(figure in page for figure in ("15.5 µs", "71.5 µs", "101 µs", "155 µs"))
    else:
        assert 'exe["main"]' in code and "_KERNEL[0](x, y, alpha)" in code


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_every_build_ships_the_page_and_the_instruction_names_it(tmp_path: Path, dsl: str) -> None:
    task = build_task("p36", dsl, tmp_path)
    docs = task.path / "environment" / "docs"
    page = (docs / launch_guide.LAUNCH_GUIDE_FILE).read_text()
    assert page == launch_guide.render_launch_guide(dsl_info(dsl), TARGETS["h200"])
    assert f"({launch_guide.LAUNCH_GUIDE_FILE})" in (docs / "README.md").read_text()
    assert f"docs/{launch_guide.LAUNCH_GUIDE_FILE}" in (task.path / "instruction.md").read_text()


@pytest.mark.slow  # compiles the page's kernel: 9-18 s per case on 2 cores
@pytest.mark.parametrize("gpu", ["h200", pytest.param("b200", marks=pytest.mark.slow)])
@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_page_code_compiles_for_the_gpus_arch_and_its_call_reaches_the_gpu(
    tmp_path: Path, dsl: str, gpu: str
) -> None:
    if not _installed(DSL_MODULES[dsl]):
        pytest.skip(f"{DSL_MODULES[dsl]} is not installed here")
    arch = TARGETS[gpu].arch
    (code,) = launch_guide.guide_code(dsl, TARGETS[gpu])
    if dsl == "tirx":
        assert f'"arch": "{arch}"' in code
    snippet = tmp_path / f"snippet_{dsl}.py"
    snippet.write_text(code)  # CuTe kernels must live in a real file
    env = {k: v for k, v in os.environ.items() if k != "CUDA_PATH"}
    env["CUTE_DSL_ARCH"] = arch
    result = subprocess.run(
        [sys.executable, "-c", HARNESS, dsl, str(snippet), arch],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [line for line in result.stdout.splitlines() if line.startswith(("RAISED", "RET"))]
    assert len(calls) == 2 and all(GPU_NEEDED[dsl] in line for line in calls), result.stdout
    if dsl == "tirx":
        cubins = [line for line in result.stdout.splitlines() if line.startswith("CUBIN")]
        assert len(cubins) == 1 and int(cubins[0].split()[1]) > 0
