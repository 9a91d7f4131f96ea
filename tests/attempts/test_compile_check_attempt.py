"""A scripted Terminus-2 attempt compiles a tiny CuTe and a tiny TIRx kernel in the sandbox.

The agent runs in the local sandbox (the bubblewrap jail, no GPU, no network), writes a
p28 solution with one small kernel and runs the task's ``compile_check``: the kernel must
compile for sm_90a on the CPU. On a task graded on the B200 (p52), compile_check defaults to
sm_100a: the Blackwell kernel passes, the Hopper (WGMMA) one fails naming the feature (the one
test of it: tests/tasks/test_compile_check.py runs the script on the host for the failures).
The three attempts run at once, so the B200 one's waits overlap the others'. Skips when a DSL
is not installed (``make install`` installs both, so CI runs it).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import textwrap
import zlib
from pathlib import Path

import pytest
from attempts_support import MODEL_INFO, needs_namespaces
from cpu_backend import CpuPreviewBackend

from engine.attempts.observer import MemoryObserver
from engine.attempts.runner import run_attempt
from engine.attempts.spec import AttemptSpec, ModelSpec
from engine.standins.scripted_llm import Scenario, ScriptedLLMServer

KERNELS = Path(__file__).resolve().parents[1] / "tasks" / "fixtures"
DSL_MODULES = {"cute": "cutlass.cute", "tirx": "tvm.script.tirx"}
DONE = "CC-DONE rc="


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _scenario(dsl: str) -> Scenario:
    source = (KERNELS / f"p28_{dsl}_tiny.py").read_text()
    write = f"cat > solution.py << 'PYEOF'\n{source}PYEOF\n"
    run = 'compile_check solution.py; echo "CC""-DONE rc=$?"\n'
    return Scenario.from_dict(
        {
            "name": f"compile-{dsl}",
            "turns": [
                {
                    "analysis": "No GPU here; compile the kernel before submitting.",
                    "plan": "Write a solution with one kernel, then run compile_check.",
                    "commands": [
                        {"keystrokes": write, "duration": 0.3},
                        {"keystrokes": run, "duration": 5.0},
                    ],
                },
                {
                    "wait_for": DONE,
                    "analysis": "compile_check finished.",
                    "plan": "Stop here.",
                    "task_complete": True,
                },
            ],
        }
    )


def _spec(tmp_path: Path, server: ScriptedLLMServer, dsl: str) -> AttemptSpec:
    return AttemptSpec(
        model=ModelSpec(
            name=f"openai/compile-{dsl}",
            api_base=server.base_url,
            api_key_env="MKB_TEST_API_KEY",
            model_info=MODEL_INFO,
        ),
        attempt_id=f"cc-{dsl}",
        problem_id="p28",
        dsl=dsl,
        work_dir=tmp_path / dsl,
        budget_s=240,
        environment_kwargs={"root_dir": str(tmp_path)},
    )


def _terminal(observer: MemoryObserver, attempt_id: str) -> str:
    return "".join(
        result["content"]
        for aid, step in observer.steps
        if aid == attempt_id and step["source"] == "agent"
        for result in step.get("observation", {}).get("results", [])
    )


SOLUTIONS = Path(__file__).resolve().parents[2] / "problems" / "solutions"
B200_DONE = ("CC-BW-DONE rc=", "CC-HOP-DONE rc=")


def _write_packed(name: str, source: str) -> str:
    """Keystrokes that write ``source`` to ``name`` (zlib + base64: short enough to type)."""
    packed = base64.b64encode(zlib.compress(source.encode(), 9)).decode()
    lines = "\n".join(textwrap.wrap(packed, 76))
    return (
        f"base64 -d > {name}.z << 'B64EOF'\n{lines}\nB64EOF\n"
        f"python3 -c \"import zlib;open('{name}','wb').write(zlib.decompress("
        f"open('{name}.z','rb').read()))\"\n"
    )


def _b200_scenario() -> Scenario:
    blackwell = (SOLUTIONS / "variants" / "p52_cute_tcgen05.py").read_text()
    hopper = (SOLUTIONS / "p52_cute.py").read_text()
    steps = []
    for (name, source), done in zip(
        (("blackwell.py", blackwell), ("hopper.py", hopper)), B200_DONE
    ):
        marker = done.split(" ")[0]
        run = f'compile_check {name}; echo "{marker[:3]}""{marker[3:]} rc=$?"\n'
        steps.append(
            {
                "analysis": "The grading GPU is a B200; compile for it.",
                "plan": f"Write {name} and run compile_check on it.",
                "commands": [
                    {"keystrokes": _write_packed(name, source), "duration": 1.0},
                    {"keystrokes": run, "duration": 10.0},
                ],
            }
        )
    steps[1]["wait_for"] = B200_DONE[0]
    done = {"wait_for": B200_DONE[1], "analysis": "Done.", "plan": "Stop.", "task_complete": True}
    return Scenario.from_dict({"name": "compile-b200", "turns": [*steps, done]})


def _b200_spec(tmp_path: Path, server: ScriptedLLMServer) -> AttemptSpec:
    spec = _spec(tmp_path, server, "cute")
    spec.model.name, spec.attempt_id = "openai/compile-b200", "cc-b200"
    spec.work_dir = tmp_path / "b200"  # its own, beside the p28 attempts'
    spec.problem_id, spec.gpu, spec.budget_s = "p52", "b200", 600
    return spec


@needs_namespaces
@pytest.mark.slow
async def test_agent_compiles_kernels_in_the_sandbox_for_the_task_gpu_without_a_gpu(
    tmp_path: Path,
) -> None:
    """Three attempts at once, in the jail: p28 in CuTe and in TIRx compile for sm_90a; p52
    graded on the B200 compiles its Blackwell kernel (tcgen05, two kernels) for sm_100a and
    gets the Hopper one (WGMMA) refused naming the feature."""
    missing = [m for m in DSL_MODULES.values() if not _installed(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (make install installs both DSLs)")
    observer = MemoryObserver()
    scenarios = {f"compile-{dsl}": _scenario(dsl) for dsl in DSL_MODULES}
    scenarios["compile-b200"] = _b200_scenario()
    async with ScriptedLLMServer(scenarios) as server:
        specs = [_spec(tmp_path, server, dsl) for dsl in DSL_MODULES]
        specs.append(_b200_spec(tmp_path, server))
        outcomes = await asyncio.gather(
            *(run_attempt(spec, CpuPreviewBackend(), observer) for spec in specs)
        )

    for outcome in outcomes:
        assert outcome.state == "finished", outcome.error
        assert outcome.submissions_used == 0
    for dsl in DSL_MODULES:
        terminal = _terminal(observer, f"cc-{dsl}")
        assert f"{DONE}0" in terminal, terminal[-3000:]
        assert "compile_check: OK, solution.py compiled for sm_90a" in terminal
        expected = "kernel kernel_cutlass__add_kernel" if dsl == "cute" else "-byte cubin"
        assert expected in terminal, terminal[-3000:]
    terminal = _terminal(observer, "cc-b200")
    assert f"{B200_DONE[0]}0" in terminal, terminal[-3000:]
    assert "compile_check: OK, blackwell.py compiled for sm_100a" in terminal
    for kernel in ("kernel_cutlass__quantize_kernel", "kernel_cutlass_kernel_mkb_solution_Sm100"):
        assert f"  kernel {kernel}" in terminal, terminal[-3000:]  # both of the file's kernels
    assert f"{B200_DONE[1]}1" in terminal, terminal[-3000:]
    assert "compile_check: FAILED for hopper.py (cute, sm_100a): WGMMA (warpgroup MMA)" in terminal
