"""An experiment graded without a GPU is a PREVIEW even when no verdict says "preview" (every
kernel failing on the CPU, say): it is never presented as scored on its target GPU."""

from __future__ import annotations

from pathlib import Path

from engine.analysis.outcomes import from_store
from engine.analysis.report import analyze
from engine.analysis.text import header_lines
from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest, graded_in_preview
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedRunner
from storage import queries
from storage.store import Store

CONFIG = """
[experiment]
name = "cpu"
problems = ["p28"]
agent = "simulated"
grading = "simulated"

[grading]
gpu = "h200"

[[models]]
name = "sim/a"
"""


class FailingOn:
    """A grader answering as the local grader does for a CUDA-only kernel on a host: ``fail``."""

    name = "simulated"

    def __init__(self, device: str) -> None:
        self.device = device

    async def grade(self, request: GradeRequest) -> Feedback:
        return Feedback("fail", "runtime.error", request_id=request.request_id, device=self.device)

    async def close(self) -> None:
        return None


async def run(db_path: Path, device: str) -> tuple[bool, list[str]]:
    config = parse_config(CONFIG, check_problems=False)
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=1), FailingOn(device)).run()
        exp = store.read_sync(queries.experiment, "cpu")
        assert exp is not None
        report = analyze(store.read_sync(from_store, "cpu"))
    return bool(exp.preview), header_lines(report)


async def test_failures_graded_on_the_cpu_make_a_preview_experiment(tmp_path: Path) -> None:
    preview, header = await run(tmp_path / "cpu.sqlite", "cpu (preview)")
    assert preview is True
    assert any(line.startswith("Grading: PREVIEW") for line in header)
    assert not any(line.startswith("Graded on") for line in header)
    assert any("graded in CPU preview" in line for line in header)


async def test_failures_graded_on_a_gpu_stay_scored(tmp_path: Path) -> None:
    preview, header = await run(tmp_path / "gpu.sqlite", "NVIDIA H200")
    assert preview is False
    assert "Grading: scored" in header
    assert any(line.startswith("Graded on NVIDIA H200") for line in header)


def test_a_grading_is_a_preview_by_its_verdict_or_by_its_cpu() -> None:
    assert graded_in_preview("preview", "cpu (preview)")
    assert graded_in_preview("fail", "cpu (preview)")  # a kernel failing on the CPU
    assert graded_in_preview("preview", None)
    assert not graded_in_preview("fail", "NVIDIA H200")
    assert not graded_in_preview("pass", "NVIDIA B200")
    assert Feedback(verdict="error", device="cpu (preview)").in_preview
    assert not Feedback(verdict="fail", device="NVIDIA H200").in_preview
