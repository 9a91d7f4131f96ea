"""The per-call trace of timed calls (diagnostics): CPUs from /proc, steal ticks, the rows.
A real evaluation's trace is checked end to end in test_grade_cli (``--call-trace``), its
absence when not asked in test_breakdown."""

from __future__ import annotations

import os
import time

from engine.grading.api import GradeRequest
from engine.grading.judge.call_trace import MAX_ROWS, CallTrace, cpu_of, cpu_time_ns, steal_ticks
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import make_job


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


def test_each_row_has_the_runners_cpu_time_and_the_cycle_since_the_last() -> None:
    """The runner (here this process) busy for ~20 ms of CPU between two rows: the second
    row's ``runner_cpu_ms`` and ``cycle_ms`` hold it."""
    assert cpu_time_ns(2**22 + 12345) is None  # no such process
    trace = CallTrace(os.getpid())
    # this process, not the leaf of its tree (a worker may have children of its own)
    trace.runner_pid, trace.last_cpu_ns = os.getpid(), cpu_time_ns(os.getpid())
    trace.add({"ms": 0.5, "host_ms": 0.1}, judge_ms=0.6)
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    trace.add({"ms": 0.5, "host_ms": 0.1, "faults": 3}, judge_ms=0.6)
    first, second = trace.summary()["rows"]
    assert first["faults"] is None and second["faults"] == 3  # the runner's count, if any
    assert 18 <= second["runner_cpu_ms"] < 2000, second
    assert second["cycle_ms"] >= 19, second  # the busy loop's wall time at least


def test_the_job_carries_the_diagnostic_settings() -> None:
    job = make_job(GradeRequest("p28", "cute", "x"), "cpu", EvalConfig(call_trace=True), "/t")
    assert job["call_trace"] is True
