"""A scripted Terminus-2 attempt compiles a tiny CuTe and a tiny TIRx kernel in the sandbox.

The agent runs in the local sandbox (the bubblewrap jail, no GPU, no network), writes a
p28 solution with one small kernel and runs the task's ``compile_check``: the kernel must
compile for sm_90a on the CPU. Skips when the DSL is not installed (``make install`` installs
both, so CI runs it).
"""

from __future__ import annotations

import asyncio
import importlib.util
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


@needs_namespaces
@pytest.mark.slow
async def test_agent_compiles_cute_and_tirx_kernels_in_the_sandbox_without_a_gpu(
    tmp_path: Path,
) -> None:
    missing = [m for m in DSL_MODULES.values() if not _installed(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (make install installs both DSLs)")
    observer = MemoryObserver()
    scenarios = {f"compile-{dsl}": _scenario(dsl) for dsl in DSL_MODULES}
    async with ScriptedLLMServer(scenarios) as server:
        outcomes = await asyncio.gather(
            *(
                run_attempt(_spec(tmp_path, server, dsl), CpuPreviewBackend(), observer)
                for dsl in DSL_MODULES
            )
        )

    for dsl, outcome in zip(DSL_MODULES, outcomes):
        assert outcome.state == "finished", outcome.error
        assert outcome.submissions_used == 0
        terminal = _terminal(observer, f"cc-{dsl}")
        assert f"{DONE}0" in terminal, terminal[-3000:]
        assert "compile_check: OK, solution.py compiled for sm_90a" in terminal
        expected = "kernel kernel_cutlass__add_kernel" if dsl == "cute" else "-byte cubin"
        assert expected in terminal, terminal[-3000:]
