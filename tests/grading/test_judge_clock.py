"""The judge's clock settles a score: the mismatch bound and the floor, from calibrations."""

from __future__ import annotations

from typing import Any

import pytest

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.clock import JudgeClock
from engine.grading.judge.state import CallFigures, Evaluation
from engine.grading.verdict import Rejected

NOOP = {"bound_ms": 0.6, "gap_median_ms": 0.25, "trip_gap_median_ms": 0.3}


class Clock(JudgeClock):
    """Only the arithmetic: calibrations and per-call figures given directly."""

    def __init__(self, runner_ms: list[float], gap: float, report: float, eager: dict) -> None:
        self.result: dict[str, Any] = {
            "clock": dict(NOOP),
            "eager_clock": {"call_excess_ms": 0.0, "trip_excess_ms": 0.0, **eager},
            "eager_median_ms": 10.0,
        }
        evaluation = Evaluation({}, None, None, True, "full", self.result)  # type: ignore[arg-type]
        figures = CallFigures(
            CallBreakdown(self.result),
            runner_ms=runner_ms,
            gaps=[gap] * len(runner_ms),
            judge_ms=[ms + gap + report for ms in runner_ms],
            reports_ms=[report] * len(runner_ms),
        )
        super().__init__(evaluation, figures)

    def settle_breakdown(self) -> None:  # the runner's unscored split is not under test
        pass

    @property
    def flags(self) -> list[str]:
        return self.result.get("flags", [])


def test_honest_long_call_within_the_references_excess_passes() -> None:
    # a big problem: the call path costs 0.45 ms more than a no-op, for the reference too
    clock = Clock(
        [84.0] * 9, gap=0.7, report=0.3, eager={"call_excess_ms": 0.45, "trip_excess_ms": 0.7}
    )
    clock.settle_timing()
    assert clock.result["clock"]["scored_by"] == "runner_figure"
    assert clock.result["impl_median_ms"] == 84.0


def test_the_same_gap_without_a_reference_excess_is_a_mismatch() -> None:
    clock = Clock([84.0] * 9, gap=0.7, report=0.3, eager={"call_excess_ms": 0.0})
    with pytest.raises(Rejected) as caught:
        clock.settle_timing()
    assert caught.value.code == "timing.mismatch"


def test_a_shaved_figure_is_scored_at_the_floor() -> None:
    # true 0.62 ms; the runner reports 0.02 ms, within the bound on the call, and moves the
    # rest of the work into its report
    clock = Clock([0.02] * 9, gap=0.35, report=0.6, eager={})
    clock.settle_timing()
    assert clock.result["clock"]["scored_by"] == "judge_floor"
    assert "timing.judge_floor" in clock.flags
    # judge = 0.02 + 0.35 + 0.6 = 0.97; allowance = 0.3 + max(0, 0.35) + 0.05 = 0.7
    assert clock.result["impl_median_ms"] == pytest.approx(0.27)


def test_an_honest_small_call_keeps_its_own_figure() -> None:
    clock = Clock([0.12] * 9, gap=0.27, report=0.05, eager={"trip_excess_ms": 0.02})
    clock.settle_timing()
    assert clock.result["clock"]["scored_by"] == "runner_figure"
    assert clock.result["speedup"] == pytest.approx(10.0 / 0.12)


def test_a_dsl_call_path_costlier_than_the_references_keeps_its_figure() -> None:
    # p25 TIRx on the H200: figure 0.044 ms, judge 0.68 ms, no-op trip gap 0.30 ms, while the
    # reference's real calls cost only 0.04 ms over its no-op
    clock = Clock([0.044] * 9, gap=0.41, report=0.226, eager={"trip_excess_ms": 0.04})
    clock.settle_timing()
    assert clock.result["clock"]["scored_by"] == "runner_figure"
    assert clock.result["impl_median_ms"] == pytest.approx(0.044)
