"""The noise data of an experiment as the analysis reads it from the store: each attempt's
repeated finals (runtimes, grading host, verdicts) and every stored A/A series of its problems
(repeated finals of any experiment and ``mkb noise`` runs; ``storage/repeats.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from engine.analysis.noise import Series, check_time_source
from engine.analysis.outcomes import ScoredAttempt

VERDICT_CHANGED = "final_repeats.verdict_changed"  # a repeat's verdict differs from the final's


def attach_repeats(
    db: Any,
    experiment_id: str,
    rows: Sequence[ScoredAttempt],
    attempt_ids: Sequence[int],
    time: str = "e2e",
) -> tuple[list[ScoredAttempt], list[Series], dict[str, int]]:
    """``rows`` (attempts ``attempt_ids``) with their repeats and hosts, the series, and the
    passing repeats left out of both for a runtime that is not a finite positive number
    (``timing.invalid``: stored before timings were checked where they enter)."""
    from engine.grading.admission import INVALID_TIMING, runtime_defect
    from storage import repeats

    field = check_time_source(time)
    if field != "impl_median_ms":  # spans live in the feedback: engine.analysis.spans
        raise ValueError(f"attach_repeats reads end-to-end runtimes, not {time!r}")
    finals = repeats.experiment_finals(db, experiment_id)
    out: list[ScoredAttempt] = []
    for row, attempt_id in zip(rows, attempt_ids, strict=True):
        graded = finals.get(attempt_id, [])
        if not graded:
            out.append(row)
            continue
        passing = [getattr(r, field) for r in graded if r.passed]
        values = tuple(float(v) for v in passing if runtime_defect(v) is None)
        flags = row.flags
        if any(r.passed != row.passed for r in graded) and VERDICT_CHANGED not in flags:
            flags = (*flags, VERDICT_CHANGED)
        out.append(dataclasses.replace(row, repeats_ms=values, host=graded[0].host, flags=flags))
    stored = repeats.problem_series(db, {r.problem for r in rows}, field)
    series = [
        Series(s["problem"], s["host"], tuple(s["values"]), s["key"], s["dsl"], s["preview"])
        for s in stored
    ]
    invalid = sum(s["invalid"] for s in stored)  # the attempts' own series among them
    return out, series, ({INVALID_TIMING: invalid} if invalid else {})
