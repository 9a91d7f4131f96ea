"""Repeated gradings of one unchanged file (the ``timing_repeats`` table, migrations m007
and m008).

A *series* is one file graded several times on one host: an attempt's repeated finals
(:func:`final_series`, repeat 1 being its final evaluation) or an ``mkb noise`` run
(``noise:<id>``). Each grading is one row, unique per (series, repeat): a repeat stored
``done`` is never graded again; one left ``running`` (its process was killed) is graded again.
A *paired job* (m008, ``engine/paired_repeats.py``) grades a comparison's two finals
interleaved on one slot: its rows share a ``pair_key`` (:func:`pair_key`), each arm is its
own series (:func:`pair_series`) and ``repeat`` is the row's position in the job's order.
Plain functions over a connection, like ``storage.writes`` and ``storage.queries``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from storage.db import now
from storage.event_rows import text_hash

PASSING = ("pass", "preview")

INVALID_TIMING = "timing.invalid"  # engine/grading/admission.py's reason code

def final_series(attempt_id: int, try_number: int) -> str:
    """The series key of an attempt try's repeated finals."""
    return f"final:{attempt_id}:{try_number}"


ARMS = ("baseline", "treatment")


def pair_key(experiment_id: str, comparison_id: int) -> str:
    """The key both arms' rows of one comparison's paired job share."""
    return f"pair:{experiment_id}:{comparison_id}"


def pair_series(experiment_id: str, comparison_id: int, arm: str) -> str:
    """The series of one arm of a comparison's paired job."""
    return f"{pair_key(experiment_id, comparison_id)}:{arm}"


@dataclass(frozen=True)
class RepeatRow:
    id: int
    series: str
    repeat: int
    kind: str
    experiment_id: str | None
    attempt_id: int | None
    problem_id: str
    dsl: str
    source_hash: str
    host: str
    state: str
    verdict: str | None
    reason: str | None
    impl_median_ms: float | None
    eager_median_ms: float | None
    speedup: float | None
    started_at: str
    finished_at: str | None
    pair_key: str | None = None
    arm: str | None = None
    slot: str = ""
    span_ms: float | None = None

    @property
    def passed(self) -> bool:
        return self.state == "done" and self.verdict in PASSING


_COLUMNS = (
    "id, series, repeat, kind, experiment_id, attempt_id, problem_id, dsl, source_hash, host, "
    "state, verdict, reason, impl_median_ms, eager_median_ms, speedup, started_at, finished_at, "
    "pair_key, arm, slot, span_ms"
)


def _rows(
    db: Database, where: str, params: Iterable[Any], order: str = "series, repeat"
) -> list[RepeatRow]:
    cursor = db.execute(
        f"SELECT {_COLUMNS} FROM timing_repeats WHERE {where} ORDER BY {order}",
        list(params),
    )
    return [RepeatRow(*row) for row in cursor.fetchall()]


# -- writes -----------------------------------------------------------------------------------
def start_repeat(
    db: Database,
    series: str,
    repeat: int,
    *,
    kind: str,
    problem_id: str,
    dsl: str,
    source: str,
    host: str = "",
    experiment_id: str | None = None,
    attempt_id: int | None = None,
    pair: str | None = None,
    arm: str | None = None,
) -> bool:
    """Open a repeat's row (``running``); False when it is already graded (``done``).
    ``pair`` and ``arm``: the paired job (:func:`pair_key`) and arm the row belongs to."""
    row = db.execute(
        "SELECT state FROM timing_repeats WHERE series=? AND repeat=?", [series, repeat]
    ).fetchone()
    if row is not None and row[0] == "done":
        return False
    db.execute(
        "INSERT INTO timing_repeats (series, repeat, kind, experiment_id, attempt_id, "
        "problem_id, dsl, source_hash, host, state, started_at, pair_key, arm) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?) "
        "ON CONFLICT (series, repeat) DO UPDATE SET state='running', "
        "started_at=excluded.started_at, host=excluded.host",
        [
            series,
            repeat,
            kind,
            experiment_id,
            attempt_id,
            problem_id,
            dsl,
            text_hash(source),
            host,
            now(),
            pair,
            arm,
        ],
    )
    return True


def finish_repeat(
    db: Database,
    series: str,
    repeat: int,
    feedback: Mapping[str, Any],
    host: str | None = None,
    span_ms: float | None = None,
) -> bool:
    """Record a repeat's feedback once (``done``; an ``error`` verdict leaves it to be graded
    again), with the slot that graded it (``feedback["host"]``) and the submission's GPU span
    (``span_ms``, the caller reads it from the feedback). False when the repeat was already
    done: the first result stands."""
    state = "error" if feedback.get("verdict") == "error" else "done"
    cur = db.execute(
        "UPDATE timing_repeats SET state=?, verdict=?, reason=?, impl_median_ms=?, "
        "eager_median_ms=?, speedup=?, feedback_json=?, finished_at=?, "
        "host=coalesce(?, host), slot=?, span_ms=? "
        "WHERE series=? AND repeat=? AND state!='done'",
        [
            state,
            feedback.get("verdict"),
            feedback.get("reason"),
            feedback.get("impl_median_ms"),
            feedback.get("eager_median_ms"),
            feedback.get("speedup"),
            json.dumps(dict(feedback), default=str),
            now(),
            host,
            str(feedback.get("host") or ""),
            span_ms,
            series,
            repeat,
        ],
    )
    return cur.rowcount > 0


def record_repeat(
    db: Database,
    series: str,
    repeat: int,
    feedback: Mapping[str, Any],
    **start: Any,
) -> bool:
    """Open and finish a repeat in one step (a grading already made, e.g. the final);
    ``start``: :func:`start_repeat`'s keywords, and ``span_ms`` for :func:`finish_repeat`."""
    span_ms = start.pop("span_ms", None)
    if not start_repeat(db, series, repeat, **start):
        return False
    return finish_repeat(db, series, repeat, feedback, span_ms=span_ms)


# -- reads ------------------------------------------------------------------------------------
def series_rows(db: Database, series: str) -> list[RepeatRow]:
    return _rows(db, "series=?", [series])


def done_repeats(db: Database, series: str) -> set[int]:
    """The repeat numbers of a series already graded."""
    return {
        int(r[0])
        for r in db.execute(
            "SELECT repeat FROM timing_repeats WHERE series=? AND state='done'", [series]
        ).fetchall()
    }


def experiment_finals(db: Database, experiment_id: str) -> dict[int, list[RepeatRow]]:
    """Each attempt's repeated finals of its latest try with any (graded rows, by repeat).
    Only ``final:`` series: a comparison's paired gradings (``pair:``) are read by
    :func:`paired_rows`."""
    by_series: dict[str, list[RepeatRow]] = defaultdict(list)
    where = "experiment_id=? AND kind='final' AND state='done' AND series LIKE 'final:%'"
    for row in _rows(db, where, [experiment_id]):
        by_series[row.series].append(row)
    latest: dict[int, tuple[int, list[RepeatRow]]] = {}
    for key, rows in by_series.items():
        attempt_id, try_number = (int(x) for x in key.split(":")[1:3])
        if attempt_id not in latest or try_number > latest[attempt_id][0]:
            latest[attempt_id] = (try_number, rows)
    return {attempt_id: rows for attempt_id, (_, rows) in latest.items()}


def problem_series(
    db: Database,
    problem_ids: Iterable[str] | None = None,
    field: str = "impl_median_ms",
    experiment_id: str | None = None,
) -> list[dict[str, Any]]:
    """Every stored series of these problems, one per (series, grading host): key, problem,
    dsl, host, the passing gradings' ``field`` values (finite and positive), and whether any
    was a preview. A series graded on several hosts is split by host, never filed under one.
    With ``experiment_id``: that experiment's series and every ``mkb noise`` run only (another
    experiment's finals were graded under other loads and days).
    Passing gradings left out for a value that is not finite and positive are counted
    (``invalid``), as is a pass the engine refused for its timing (``timing.invalid``)."""
    if field not in ("impl_median_ms", "eager_median_ms"):
        raise ValueError(f"not a runtime column: {field!r}")
    ids = sorted(set(problem_ids)) if problem_ids is not None else None
    where = "state='done'"
    params: list[Any] = []
    if ids is not None:
        if not ids:
            return []
        where += f" AND problem_id IN ({', '.join('?' for _ in ids)})"
        params = list(ids)
    if experiment_id is not None:
        where += " AND (kind='noise' OR experiment_id=?)"
        params.append(experiment_id)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    sql = (
        f"SELECT series, problem_id, dsl, host, verdict, reason, {field} FROM timing_repeats "
        f"WHERE {where} ORDER BY series, repeat"
    )
    for series, problem, dsl, host, verdict, reason, value in db.execute(sql, params).fetchall():
        entry = out.setdefault(
            (series, host),
            {
                "key": series,
                "problem": problem,
                "dsl": dsl,
                "host": host,
                "values": [],
                "preview": False,
                "invalid": 0,
            },
        )
        if verdict not in PASSING:  # a pass the engine refused for its timing is counted too
            entry["invalid"] += reason == INVALID_TIMING
            continue
        if _positive(value):
            entry["values"].append(float(value))
            entry["preview"] = entry["preview"] or verdict == "preview"
        else:  # a pass without a finite positive runtime: left out, counted
            entry["invalid"] += 1
    return list(out.values())


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def attempts_missing(db: Database, experiment_id: str, repeats: int) -> list[int]:
    """Finished attempts with a passing final whose latest try has fewer than ``repeats``
    graded repeats (repeat 1 included), in id order: what a resumed run still has to grade."""
    rows = db.execute(
        "SELECT a.id FROM attempts a LEFT JOIN timing_repeats t "
        "ON t.series = 'final:' || a.id || ':' || a.tries AND t.state = 'done' "
        "WHERE a.experiment_id = ? AND a.state = 'finished' AND a.outcome IN ('pass', 'preview') "
        "GROUP BY a.id HAVING count(t.id) < ? ORDER BY a.id",
        [experiment_id, repeats],
    ).fetchall()
    return [int(r[0]) for r in rows]


def paired_rows(db: Database, experiment_id: str) -> dict[int, list[RepeatRow]]:
    """Each comparison's paired-job rows (any state), by comparison id, in the job's order
    (``repeat``): the i-th ``baseline`` and i-th ``treatment`` rows form pair i; each row
    names its ``slot``."""
    prefix = f"pair:{experiment_id}:"
    out: dict[int, list[RepeatRow]] = defaultdict(list)
    where = "experiment_id=? AND pair_key IS NOT NULL AND substr(pair_key, 1, ?) = ?"
    for row in _rows(db, where, [experiment_id, len(prefix), prefix], "pair_key, repeat"):
        out[int(str(row.pair_key)[len(prefix) :])].append(row)
    return dict(out)


def pair_done(db: Database, key: str) -> list[RepeatRow]:
    """One paired job's rows stored ``done``, in its order."""
    return _rows(db, "pair_key=? AND state='done'", [key], "repeat")
