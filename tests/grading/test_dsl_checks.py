"""DSL launch counting and the bypass test inside the grading child, on a CPU, with a
stand-in CuTe DSL (fixtures/fake_dsl) that has the real package's launch path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig
from engine.grading.parent.supervise import REPO_ROOT

# slow: real gradings; one xdist group: the module's own warm backend starts once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dsl_checks")]

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "dsl").glob("*.py"))


@pytest.fixture(scope="module")
def grade_with_fake_dsl() -> Iterator[Callable[[str], Feedback]]:
    config = EvalConfig(
        timeout_s=60.0,  # no case here is about time; a loaded CI host needs headroom
        memory_limit_mb=3072,
        dsl_checks=True,
        env={
            "PYTHONPATH": f"{FIXTURES / 'fake_dsl'}:{REPO_ROOT}",
            "MKB_RUNNER_PATHS": str(FIXTURES / "fake_dsl"),
        },
    )
    runner = asyncio.Runner()
    backend = LocalBackend(gpus=None, config=config, preload_dsls=True)
    runner.run(backend.start())
    assert "cutlass.cute" in backend.slots[0].parent.ready["preloaded"]

    def run(source: str) -> Feedback:
        return runner.run(backend.grade(GradeRequest("p28", "cute", source, device="cpu")))

    yield run
    runner.run(backend.close())
    runner.close()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_dsl_checks(grade_with_fake_dsl: Callable[[str], Feedback], path: Path) -> None:
    expected = path.read_text().splitlines()[0].split(":", 1)[1].strip()
    feedback = grade_with_fake_dsl(path.read_text())
    if expected == "preview":
        assert feedback.verdict == "preview", (feedback.reason, feedback.message)
        assert feedback.dsl_launches_per_call == 1.0
        assert feedback.bypass == "outputs_failed"
        assert feedback.draws[-1]["kind"] == "bypass" and not feedback.draws[-1]["passed"]
        audit = feedback.kernel_audit or {}
        assert audit.get("status") == "unavailable"  # no profiler without a GPU
        assert any(n.startswith("kernel_cutlass_") for n in audit["compiled_kernels"])
    else:
        assert (feedback.verdict, feedback.reason) == ("fail", expected), feedback.message
