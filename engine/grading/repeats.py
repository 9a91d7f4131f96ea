"""One submission graded several times: the verdicts and the spread of the speedups.

A small call's speedup moves with the grading host's CPU speed (on the H200 virtual machine,
p36 by 10–20 % between runs, inside the grader and outside it alike; docs/grading.md,
"The small-call spread"), so a single reading of a call under ~150 µs is one draw.
``mkb grade --repeat N`` grades N times, each in a fresh child, and reports the median with
its range.
"""

from __future__ import annotations

import statistics
from typing import Any

MAX_REPEATS = 20
PASSING = ("pass", "preview")


def summarize(feedbacks: list[dict[str, Any]]) -> dict[str, Any]:
    """Verdict counts and the speedups' median, range and spread (range over median)."""
    verdicts: dict[str, int] = {}
    for fb in feedbacks:
        verdicts[str(fb.get("verdict"))] = verdicts.get(str(fb.get("verdict")), 0) + 1
    speedups = [
        float(fb["speedup"])
        for fb in feedbacks
        if fb.get("verdict") in PASSING and isinstance(fb.get("speedup"), (int, float))
    ]
    out: dict[str, Any] = {
        "gradings": len(feedbacks),
        "verdicts": verdicts,
        "all_passed": bool(feedbacks) and all(fb.get("verdict") in PASSING for fb in feedbacks),
        "speedups": [round(s, 4) for s in speedups],
        "speedup_median": None,
        "speedup_min": None,
        "speedup_max": None,
        "spread_pct": None,
    }
    if speedups:
        median = statistics.median(speedups)
        out.update(
            speedup_median=round(median, 4),
            speedup_min=round(min(speedups), 4),
            speedup_max=round(max(speedups), 4),
            spread_pct=round(100.0 * (max(speedups) - min(speedups)) / median, 1)
            if median > 0
            else None,
        )
    return out


def render(summary: dict[str, Any]) -> str:
    """One line for the terminal."""
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary["verdicts"].items()))
    n = summary["gradings"]
    line = f"{n} grading{'' if n == 1 else 's'}: {counts}"
    if summary["speedup_median"] is not None:
        line += (
            f"; speedup median {summary['speedup_median']:.3g}x"
            f" (min {summary['speedup_min']:.3g}x, max {summary['speedup_max']:.3g}x,"
            f" spread {summary['spread_pct']} %)"
        )
    return line
