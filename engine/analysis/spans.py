"""The GPU span as a second time source (``mkb analyze --time span``; docs/analysis.md, "A
second time: the GPU span").

Each grading's feedback carries, per side, the runners' GPU span per call: the median over
profiled calls after the timed ones of first device start to last device end
(``clock.breakdown.submission.span_ms`` and ``clock.breakdown.eager.span_ms``; informational,
runner-reported, never the score). On spans, an attempt's runtime is the median span of its
passing repeated finals (of its final evaluation without repeats), its reference time the
eager span, and the A/A series are the stored gradings' spans.

A passing attempt without both spans (CPU preview, graded before spans were recorded, no
working profiler) has no runtime on spans: it is left out of every table and counted, never
given its end-to-end time instead. Failing attempts need no runtime and stay.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.analysis.noise import Series
from engine.analysis.scored import ScoredAttempt

SIDES = ("submission", "eager")
LABELS = {
    "e2e": "end to end (the contract's score)",
    "span": "GPU span per call (runner-reported, informational; not the score)",
}
PASSING = ("pass", "preview")


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def span_of(feedback: Any, side: str) -> float | None:
    """The span (ms) a grading's feedback reports for ``side`` ("submission" or "eager");
    None unless it is a positive finite number."""
    clock = feedback.get("clock") if isinstance(feedback, Mapping) else None
    split = clock.get("breakdown") if isinstance(clock, Mapping) else None
    figures = split.get(side) if isinstance(split, Mapping) else None
    return _positive(figures.get("span_ms")) if isinstance(figures, Mapping) else None


def _span_sql(side: str) -> str:
    """A feedback column's span for ``side`` as SQL (NULL for invalid JSON or a non-number)."""
    path = f"$.clock.breakdown.{side}.span_ms"
    number = f"json_type(feedback_json, '{path}') IN ('integer', 'real')"
    value = f"CASE WHEN {number} THEN json_extract(feedback_json, '{path}') END"
    return f"CASE WHEN json_valid(feedback_json) THEN {value} END"


def repeat_spans(db: Any, experiment_id: str) -> dict[int, tuple[float | None, float | None]]:
    """The (implementation, eager) spans of an experiment's graded final repeats, by row id."""
    rows = db.execute(
        f"SELECT id, {_span_sql('submission')}, {_span_sql('eager')} FROM timing_repeats "
        "WHERE experiment_id = ? AND kind = 'final' AND state = 'done'",
        [experiment_id],
    ).fetchall()
    return {int(i): (_positive(impl), _positive(eager)) for i, impl, eager in rows}


def span_series(
    db: Any, problem_ids: Iterable[str], experiment_id: str | None = None
) -> list[Series]:
    """Every stored series of these problems on spans (the passing gradings' implementation
    spans), one per (series, host) as ``storage.repeats.problem_series`` reads them; with
    ``experiment_id``, that experiment's series and the ``mkb noise`` runs only."""
    ids = sorted(set(problem_ids))
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    scope = " AND (kind = 'noise' OR experiment_id = ?)" if experiment_id is not None else ""
    cursor = db.execute(
        f"SELECT series, problem_id, dsl, host, verdict, {_span_sql('submission')} "
        f"FROM timing_repeats WHERE state = 'done' AND problem_id IN ({marks}){scope} "
        "ORDER BY series, repeat",
        [*ids, experiment_id] if scope else ids,
    )
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for key, problem, dsl, host, verdict, span in cursor.fetchall():
        entry = found.setdefault(
            (key, host),
            {"problem": problem, "dsl": dsl, "host": host, "values": [], "preview": False},
        )
        value = _positive(span)
        if verdict in PASSING and value is not None:
            entry["values"].append(value)
            entry["preview"] = entry["preview"] or verdict == "preview"
    return [
        Series(e["problem"], e["host"], tuple(e["values"]), key, e["dsl"], e["preview"])
        for (key, _), e in found.items()
    ]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def attach_spans(
    db: Any,
    experiment_id: str,
    rows: Sequence[ScoredAttempt],
    attempt_ids: Sequence[int],
    finals: Mapping[int, Any],
) -> tuple[list[ScoredAttempt], list[Series]]:
    """``rows`` (attempts ``attempt_ids``) with their spans, and the span series of their
    problems; ``finals``: each attempt's final feedback (``queries.final_feedback``)."""
    from storage import repeats

    graded = repeats.experiment_finals(db, experiment_id)
    spans = repeat_spans(db, experiment_id) if graded else {}
    out: list[ScoredAttempt] = []
    for row, attempt_id in zip(rows, attempt_ids, strict=True):
        passing = [spans.get(r.id, (None, None)) for r in graded.get(attempt_id, []) if r.passed]
        if passing:
            impl = [s for s, _ in passing if s is not None]
            eager = [e for _, e in passing if e is not None]
            found = (_median(impl), _median(eager), tuple(impl))
        else:
            final = finals.get(attempt_id, {})
            found = (span_of(final, "submission"), span_of(final, "eager"), ())
        out.append(
            dataclasses.replace(
                row, span_ms=found[0], ref_span_ms=found[1], span_repeats_ms=found[2]
            )
        )
    return out, span_series(db, {r.problem for r in rows}, experiment_id)


def on_time(rows: Iterable[ScoredAttempt], time: str) -> tuple[list[ScoredAttempt], int]:
    """``rows`` with the runtimes of time source ``time``, and how many passing attempts were
    left out for lacking them (always 0 for ``e2e``, the rows' own runtimes)."""
    if time == "e2e":
        return list(rows), 0
    if time != "span":
        raise ValueError(f"no runtimes for time source {time!r}")
    out: list[ScoredAttempt] = []
    missing = 0
    for r in rows:
        if r.span_ms is not None and r.ref_span_ms is not None:
            out.append(
                dataclasses.replace(
                    r,
                    runtime_ms=r.span_ms,
                    ref_runtime_ms=r.ref_span_ms,
                    repeats_ms=r.span_repeats_ms,
                )
            )
        elif r.passed:
            missing += 1
        else:  # a failing attempt needs no runtime: kept, with none
            out.append(dataclasses.replace(r, runtime_ms=None, ref_runtime_ms=None, repeats_ms=()))
    return out, missing


def time_summary(time: str, comparisons: int, timed: int, attempts_left_out: int) -> dict[str, Any]:
    """What the report says about its time source: which one, and (spans) how many of the
    resolved ``comparisons`` had the runtimes they need (``timed``)."""
    return {
        "source": time,
        "label": LABELS.get(time, time),
        "comparisons": comparisons,
        "with_time": timed,
        "left_out": comparisons - timed,
        "attempts_left_out": attempts_left_out,
    }
