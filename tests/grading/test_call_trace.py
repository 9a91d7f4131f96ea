"""The per-call trace of timed calls (diagnostics): CPUs from /proc, steal ticks, the rows a
real CPU-preview evaluation records when asked."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from engine.grading.api import GradeRequest
from engine.grading.call_trace import MAX_ROWS, CallTrace, cpu_of, steal_ticks
from engine.grading.evaluate import PREVIEW_COUNTS, EvalConfig, make_job
from engine.grading.local import LocalBackend
from tests.grading.conftest import SUITE_CONFIG

HONEST = (Path(__file__).parent / "fixtures" / "honest" / "p28_plain.py").read_text()


def test_cpu_of_reads_the_cpu_a_process_last_ran_on() -> None:
    cpu = cpu_of(os.getpid())
    assert cpu is not None and 0 <= cpu < (os.cpu_count() or 1)
    assert cpu_of("self") is not None
    assert cpu_of(2**22 + 12345) is None  # no such process


def test_steal_ticks_has_one_counter_per_cpu() -> None:
    ticks = steal_ticks()
    assert len(ticks) == os.cpu_count()
    assert all(isinstance(n, int) and n >= 0 for n in ticks.values())


def test_trace_keeps_sane_figures_and_stops_at_its_cap() -> None:
    trace = CallTrace(os.getpid())
    for i in range(MAX_ROWS + 5):
        trace.add({"ms": 0.5 if i else "junk", "host_ms": 0.1}, judge_ms=0.61234)
    out = trace.summary()
    assert len(out["rows"]) == MAX_ROWS
    first, second = out["rows"][0], out["rows"][1]
    assert first["ms"] is None and second["ms"] == 0.5  # junk from a runner is dropped
    assert second["judge_ms"] == 0.6123 and second["runner_cpu"] is not None
    assert out["cpus"] == os.cpu_count()


def test_the_job_carries_the_diagnostic_settings() -> None:
    job = make_job(GradeRequest("p28", "cute", "x"), "cpu", EvalConfig(call_trace=True), "/t")
    assert job["call_trace"] is True


def _grade(config: EvalConfig) -> Any:
    async def run() -> Any:
        backend = LocalBackend(gpus=None, preview_slots=1, config=config, preload_dsls=False)
        await backend.start()
        try:
            return await backend.grade(GradeRequest("p28", "cute", HONEST, device="cpu"))
        finally:
            await backend.close()

    return asyncio.run(run())


def test_a_real_evaluation_traces_every_timed_call_of_both_sides_when_asked() -> None:
    # (without call_trace there is none: test_breakdown's CPU grading checks that)
    traced = _grade(EvalConfig(**SUITE_CONFIG, call_trace=True))
    assert traced.verdict == "preview", traced.message
    trace = traced.clock["call_trace"]
    timed = PREVIEW_COUNTS[2]
    for side in ("eager", "submission"):
        rows = trace[side]["rows"]
        assert len(rows) == timed
        assert all(r["judge_ms"] > 0 and r["runner_cpu"] is not None for r in rows)
        assert all(r["ms"] is not None and r["judge_ms"] >= r["ms"] for r in rows)
