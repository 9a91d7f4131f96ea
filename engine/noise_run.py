"""The noise floor, measured (``mkb noise``): one unchanged file graded K times, each in a fresh
child process with its own judge and runner (as ``mkb grade`` grades), ``gap_s`` apart, stored
as one series of ``timing_repeats`` (``noise:<id>``) so the store's A/A band of the problem on
this grading host grows with every run (docs/analysis.md)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine.analysis.noise import Z95, Series, pool, spread
from engine.analysis.spans import span_of
from engine.final_repeats import grading_host
from engine.grading.admission import admit
from engine.grading.api import GradeRequest, graded_in_preview
from engine.grading.options import EvalConfig
from storage import repeats as repeat_rows
from storage.store import Store

PASSING = ("pass", "preview")
Report = Callable[[int, dict[str, Any]], None]


def _values(feedbacks: list[dict[str, Any]], key: str, passing_only: bool) -> list[float]:
    out = []
    for fb in feedbacks:
        value = fb.get(key)
        if passing_only and fb.get("verdict") not in PASSING:
            continue
        if isinstance(value, (int, float)) and value > 0:
            out.append(float(value))
    return out


def _figures(values: list[float]) -> dict[str, Any]:
    """A series' spread, its A/A band (95 % of log(t₁/t₂), from its SD of log runtime) and the
    limit a comparison of single gradings would be held to (None below 4 dof)."""
    figures: dict[str, Any] = dict(spread(values))
    sigma = figures["sigma"]
    figures["aa_band"] = None if sigma is None else Z95 * math.sqrt(2) * sigma
    band = pool([Series("-", "-", tuple(values))]).get(("-", "", "-")) if values else None
    figures["limit_r1"] = band.limit(1, 1) if band is not None else None
    return figures


def measure(
    request: GradeRequest,
    config: EvalConfig,
    device: str,
    repeats: int,
    *,
    gap_s: float = 0.0,
    store: Store | None = None,
    report: Report | None = None,
) -> dict[str, Any]:
    """Grade ``request`` ``repeats`` times and summarise the spread (and the stored band)."""
    from engine.grading.parent.evaluate import grade_in_subprocess

    series = f"noise:{uuid.uuid4().hex[:12]}"
    feedbacks: list[dict[str, Any]] = []
    host = ""
    for k in range(1, repeats + 1):
        if k > 1 and gap_s > 0:
            time.sleep(gap_s)
        if store is not None:
            store.write_sync(
                repeat_rows.start_repeat,
                series,
                k,
                kind="noise",
                problem_id=request.problem_id,
                dsl=request.dsl,
                source=request.source,
            )
        # admitted as the engine admits every reply: no pass without a valid runtime
        feedback = admit(grade_in_subprocess(request, config, device)).to_dict()
        host = grading_host(
            "local", str(feedback.get("device") or ""), str(feedback.get("host") or "")
        )
        if store is not None:
            span = span_of(feedback, "submission")
            store.write_sync(repeat_rows.finish_repeat, series, k, feedback, host, span)
        feedbacks.append(feedback)
        if report is not None:
            report(k, feedback)
    return summarize(request, feedbacks, series, host, store)


def summarize(
    request: GradeRequest,
    feedbacks: list[dict[str, Any]],
    series: str,
    host: str,
    store: Store | None,
) -> dict[str, Any]:
    """The run's verdicts, the implementation's and the eager reference's spread, and the
    band of the problem on this host pooled over every stored series (with ``store``)."""
    verdicts: dict[str, int] = {}
    for fb in feedbacks:
        verdicts[str(fb.get("verdict"))] = verdicts.get(str(fb.get("verdict")), 0) + 1
    stored = None
    if store is not None:
        rows = store.read_sync(repeat_rows.problem_series, [request.problem_id])
        bands = pool(
            Series(r["problem"], r["host"], tuple(r["values"]), r["key"], r["dsl"], r["preview"])
            for r in rows
        )
        band = bands.get((request.problem_id, request.dsl, host))
        stored = band.as_dict() if band is not None else None
    return {
        "problem_id": request.problem_id,
        "dsl": request.dsl,
        "series": series,
        "host": host,
        "preview": any(graded_in_preview(fb.get("verdict"), fb.get("device")) for fb in feedbacks),
        "gradings": len(feedbacks),
        "verdicts": verdicts,
        "errors": verdicts.get("error", 0),
        "implementation": _figures(_values(feedbacks, "impl_median_ms", passing_only=True)),
        "eager": _figures(_values(feedbacks, "eager_median_ms", passing_only=False)),
        "stored": store is not None,
        "stored_band": stored,
    }
