"""The runners' host / device / end-to-end split of graded submissions, read out of the stored
feedback (``clock.breakdown`` of ``submissions.feedback_json``; the grader's informational
figures, never part of the score). Read-only; run through ``Store.read`` or on any connection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

FIGURES = ("host_ms", "device_ms", "e2e_ms")
SIDES = ("submission", "eager")
_PATH = "$.clock.breakdown.{side}.{figure}"


@dataclass(frozen=True)
class CallSplitRow:
    """One graded submission's split, in milliseconds (None where none was reported)."""

    submission_id: int
    attempt_id: int
    experiment_id: str
    model: str
    problem_id: str
    dsl: str
    arm: str
    purpose: str
    try_number: int
    n: int
    verdict: str | None
    host_ms: float | None
    device_ms: float | None
    e2e_ms: float | None
    eager_host_ms: float | None
    eager_device_ms: float | None
    eager_e2e_ms: float | None


def _column(side: str, figure: str) -> str:
    name = figure if side == "submission" else f"eager_{figure}"
    path = _PATH.format(side=side, figure=figure)
    fb = "s.feedback_json"
    is_number = f"json_type({fb}, '{path}') IN ('integer', 'real')"
    number = f"CASE WHEN {is_number} THEN json_extract({fb}, '{path}') END"
    return f"CASE WHEN json_valid({fb}) THEN {number} END AS {name}"  # JSON numbers only


_SQL = (
    "SELECT s.id AS submission_id, s.attempt_id, a.experiment_id, a.model, a.problem_id, a.dsl, "
    "a.arm, s.purpose, s.try AS try_number, s.n, s.verdict, "
    + ", ".join(_column(side, figure) for side in SIDES for figure in FIGURES)
    + " FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
    "WHERE s.feedback_json IS NOT NULL"
)


def call_splits(
    db: Database, experiment_id: str | None = None, attempt_id: int | None = None
) -> list[CallSplitRow]:
    """Graded submissions with their split, oldest first (figures that are not finite
    non-negative numbers read as None)."""
    sql = _SQL
    params: list[Any] = []
    if experiment_id is not None:
        sql += " AND a.experiment_id = ?"
        params.append(experiment_id)
    if attempt_id is not None:
        sql += " AND s.attempt_id = ?"
        params.append(attempt_id)
    cursor = db.execute(sql + " ORDER BY s.attempt_id, s.try, s.purpose DESC, s.n, s.id", params)
    names = [d[0] for d in cursor.description]
    rows = []
    for values in cursor:
        row = dict(zip(names, values, strict=True))
        for side in SIDES:
            for figure in FIGURES:
                key = figure if side == "submission" else f"eager_{figure}"
                row[key] = _ms(row[key])
        rows.append(CallSplitRow(**row))
    return rows


def _ms(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None
