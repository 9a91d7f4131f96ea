"""The runners' host / device / end-to-end split: reported, sanity-bounded, never scored."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from engine.grading.judge.breakdown import MAX_MS, CallBreakdown, sane_ms
from engine.grading.options import PREVIEW_COUNTS
from engine.grading.runner import dsl_hooks
from engine.grading.runner.loop import Runner

FIXTURES = Path(__file__).parent / "fixtures"
HONEST = (FIXTURES / "honest" / "p28_plain.py").read_text()
GARBAGE = (FIXTURES / "dynamic" / "b4_garbage_breakdown_figures.py").read_text()
TIMED = PREVIEW_COUNTS[2]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0),
        (1.5, 1.5),
        (MAX_MS, MAX_MS),
        (-0.1, None),
        (MAX_MS * 2, None),
        (math.nan, None),
        (math.inf, None),
        (True, None),
        ("1.0", None),
        ([1], None),
        (None, None),
    ],
)
def test_only_finite_non_negative_times_are_kept(value: Any, expected: float | None) -> None:
    assert sane_ms(value) == expected


def test_summary_takes_medians_and_counts_what_it_ignored() -> None:
    result: dict[str, Any] = {}
    split = CallBreakdown(result)
    for host, e2e in ((0.1, 1.0), (0.3, 3.0), (0.2, 2.0), ("x", math.nan)):
        split.add("submission", {"host_ms": host, "ms": e2e})
    split.settle("submission", None, 0.0, cuda=False)
    side = result["breakdown"]["submission"]
    assert (side["host_ms"], side["e2e_ms"], side["device_ms"]) == (0.2, 2.0, None)
    assert (side["calls"], side["ignored"]) == (3, 2)
    assert result["breakdown"]["source"] == "runner" and "eager" not in result["breakdown"]


class _Link:
    """The judge's link to a real runner-side ``Runner.profile`` (no process in between)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def request(self, message: dict[str, Any], deadline: float) -> tuple[dict, list]:
        assert message["op"] == "profile" and set(message) == {"op", "span_calls"}
        return self.runner.dispatch(message, [])[0], []


def _gpu_runner(solve: Any) -> _Link:
    runner = Runner.__new__(Runner)
    runner.cuda, runner.last_inputs, runner.solve = True, [], solve
    return _Link(runner)


def test_device_time_comes_from_the_runners_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    found = dsl_hooks.ProfiledCalls(0.25, [0.3])
    monkeypatch.setattr(dsl_hooks, "profiled_calls", lambda call, n: (call(), found)[1])
    result: dict[str, Any] = {}
    threads = CallBreakdown(result).settle("eager", _gpu_runner(lambda: calls.append(1)), 0, True)
    assert result["breakdown"]["eager"]["device_ms"] == 0.25
    assert calls == [1] and isinstance(threads, int) and threads > 0


def test_a_device_time_that_is_not_a_time_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    found = dsl_hooks.ProfiledCalls(-7.0, [])
    monkeypatch.setattr(dsl_hooks, "profiled_calls", lambda call, n: found)
    result: dict[str, Any] = {}
    split = CallBreakdown(result)
    split.add("submission", {"host_ms": 0.1, "ms": 0.2})
    split.settle("submission", _gpu_runner(lambda: None), 0, True)
    side = result["breakdown"]["submission"]
    assert side["device_ms"] is None and side["ignored"] == 1 and side["e2e_ms"] == 0.2


def test_no_profiler_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tests/grading/test_breakdown_gpu covers it")
    assert dsl_hooks.profiled_device_ms(lambda: None) is None
    assert dsl_hooks.warm_profiler() is False  # nothing to start, and no error


def _split(feedback: Any) -> dict[str, Any]:
    split = feedback.clock.get("breakdown")
    assert split and split["source"] == "runner" and "never part of the score" in split["note"]
    return split


def test_cpu_grading_reports_host_and_end_to_end_per_side(grade) -> None:
    feedback = grade(HONEST)
    assert feedback.verdict == "preview" and feedback.reason is None, feedback.message
    split = _split(feedback)
    for side in ("submission", "eager"):
        figures = split[side]
        assert figures["calls"] == TIMED and figures["ignored"] == 0
        assert figures["device_ms"] is None  # no profiler on the CPU preview
        assert figures["span_ms"] is None and figures["span_calls"] == 0  # nor spans
        assert 0 < figures["host_ms"] < 10_000 and figures["host_ms"] == figures["e2e_ms"]
    # the breakdown keeps 6 decimals of a millisecond
    assert split["submission"]["e2e_ms"] == pytest.approx(feedback.impl_event_median_ms, abs=1e-6)
    assert split["eager"]["e2e_ms"] == pytest.approx(feedback.eager_event_median_ms, abs=1e-6)
    assert "call_trace" not in feedback.clock  # diagnostics only when asked for


def test_garbage_figures_are_ignored_and_change_nothing(grade) -> None:
    feedback = grade(GARBAGE)
    assert feedback.verdict == "preview" and feedback.reason is None, feedback.message
    assert feedback.speedup and feedback.impl_median_ms
    split = _split(feedback)
    submission = split["submission"]
    assert submission["host_ms"] is None and submission["ignored"] == TIMED
    assert submission["e2e_ms"] is not None and submission["e2e_ms"] > 0  # the honest figure
    assert split["eager"]["ignored"] == 0 and split["eager"]["host_ms"] > 0


def test_the_steps_between_phases_are_timed_too(grade) -> None:
    """Where an evaluation's wall time goes beyond its phases: the runners' start, the
    calibration, the settlement with its profile (benchmarks/grading_overhead.py)."""
    feedback = grade(HONEST)
    timings = feedback.timings_s
    for side in (feedback.clock["submission"], feedback.clock["eager"]):
        assert 0 < side["report_median_ms"] < side["judge_median_ms"]  # the report's share
    for step in ("reference_runner", "eager_profile", "runner_start", "calibration", "settle"):
        assert 0 <= timings[step] < timings["child_total"], (step, timings)
    assert timings["eager_profile"] <= timings["eager"]
    # the parts of a phase, each within it: the first call and the anchor checks within
    # correctness (both together at most all of it), the output checks within timing
    first, anchor = timings["correctness_first_call"], timings["correctness_anchor"]
    assert first > 0 and anchor > 0 and first + anchor <= timings["correctness"]
    assert 0 < timings["timing_checks"] <= timings["timing"]
