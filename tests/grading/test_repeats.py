"""The summary of one submission graded several times (``mkb grade --repeat N``)."""

from __future__ import annotations

from engine.grading.repeats import render, summarize


def test_median_range_and_spread_of_passing_gradings() -> None:
    out = summarize([{"verdict": "pass", "speedup": s} for s in (10.0, 8.0, 11.0)])
    assert out["all_passed"] and out["gradings"] == 3
    assert (out["speedup_median"], out["speedup_min"], out["speedup_max"]) == (10.0, 8.0, 11.0)
    assert out["spread_pct"] == 30.0
    assert render(out) == (
        "3 gradings: 3 pass; speedup median 10x (min 8x, max 11x, spread 30.0 %)"
    )


def test_a_failed_grading_fails_the_whole_and_its_speedup_is_left_out() -> None:
    out = summarize(
        [
            {"verdict": "pass", "speedup": 4.0},
            {"verdict": "fail", "speedup": 99.0, "reason": "timing.mismatch"},
            {"verdict": "error", "speedup": None},
        ]
    )
    assert not out["all_passed"]
    assert out["verdicts"] == {"pass": 1, "fail": 1, "error": 1}
    assert out["speedups"] == [4.0] and out["spread_pct"] == 0.0


def test_no_speedup_at_all_leaves_the_figures_empty() -> None:
    out = summarize([{"verdict": "fail", "speedup": None}])
    assert out["speedup_median"] is None and out["spread_pct"] is None
    assert render(out) == "1 grading: 1 fail"
    assert summarize([])["all_passed"] is False
