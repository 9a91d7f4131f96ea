"""Read queries returning typed rows; run them through ``Store.read`` (or on any connection)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from sqlite_utils import Database


def _rows[R](db: Database, cls: type[R], sql: str, params: list[Any] | None = None) -> list[R]:
    """``cls`` per result row, from the columns it has fields for (a later column of the
    same name wins, as in a dict of the row)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    cursor = db.execute(sql, params or [])
    picked = [(i, d[0]) for i, d in enumerate(cursor.description) if d[0] in names]
    return [cls(**{k: row[i] for i, k in picked}) for row in cursor]


@dataclass(frozen=True)
class ExperimentRow:
    id: str
    name: str
    state: str
    preview: int
    grading_backend: str
    config_toml: str
    config_hash: str
    created_at: str
    updated_at: str
    origin: str = ""  # "" a run of this store; else bundle:/regrade:/mkb-run:/harbor-job:...
    gpu: str = "h200"  # the grading target: b200 | h200 | h100 (problems/targets.py)


@dataclass(frozen=True)
class AttemptRow:
    id: int
    experiment_id: str
    plan_key: str
    model: str
    problem_id: str
    family: str
    dsl: str
    arm: str
    replicate: int
    round: int
    variant: str
    source_attempt_id: int | None
    attached_skill_id: int | None
    state: str
    outcome: str | None
    reason: str | None
    speedup: float | None
    impl_median_ms: float | None
    eager_median_ms: float | None
    best_speedup: float | None
    submissions_used: int
    tries: int
    budget_s: float
    task_hash: str
    skill_hash: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    agent_seconds: float
    error: str | None
    started_at: str | None
    ended_at: str | None
    created_at: str
    updated_at: str
    unsafe_no_jail: int = 0  # 1: the sandbox ran without the agent jail
    stop_reason: str | None = None  # an operator stopped it (storage/controls.py), and why


@dataclass(frozen=True)
class StepRow:
    id: int
    attempt_id: int
    try_number: int
    step_index: int
    source: str
    analysis: str
    plan: str
    keystrokes: str
    terminal_output: str
    message: str
    tokens_in: int
    tokens_out: int
    created_at: str


@dataclass(frozen=True)
class SubmissionRow:
    id: int
    attempt_id: int
    try_number: int
    purpose: str
    n: int
    source: str
    source_hash: str
    state: str
    verdict: str | None
    reason: str | None
    speedup: float | None
    impl_median_ms: float | None
    eager_median_ms: float | None
    feedback_json: str | None
    submitted_at: str
    graded_at: str | None

    @property
    def feedback(self) -> dict[str, Any] | None:
        return json.loads(self.feedback_json) if self.feedback_json else None


@dataclass(frozen=True)
class SkillRow:
    id: int
    attempt_id: int | None
    kind: str
    text: str
    text_hash: str
    author: str
    parent_skill_id: int | None
    created_at: str


@dataclass(frozen=True)
class ComparisonRow:
    id: int
    experiment_id: str
    model: str
    problem_id: str
    family: str
    direction: str
    replicate: int
    round: int
    variant: str
    source_attempt_id: int | None
    baseline_attempt_id: int | None
    treatment_attempt_id: int | None
    resolved: int
    skipped: int
    rho: float | None
    verdict: str | None
    updated_at: str


@dataclass(frozen=True)
class LabelRow:
    id: int
    task: str
    subject_type: str
    subject_id: int
    category: str
    value: str
    evidence: str
    annotator: str
    annotator_kind: str
    created_at: str


@dataclass(frozen=True)
class EventRow:
    id: int
    experiment_id: str | None
    attempt_id: int | None
    kind: str
    payload_json: str
    created_at: str

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.payload_json)


def experiments(db: Database) -> list[ExperimentRow]:
    return _rows(db, ExperimentRow, "SELECT * FROM experiments ORDER BY created_at DESC")


def experiment(db: Database, experiment_id: str) -> ExperimentRow | None:
    rows = _rows(db, ExperimentRow, "SELECT * FROM experiments WHERE id=?", [experiment_id])
    return rows[0] if rows else None


ATTEMPT_SORT_COLUMNS = (
    "id",
    "model",
    "problem_id",
    "dsl",
    "arm",
    "state",
    "submissions_used",
    "best_speedup",
    "speedup",
    "started_at",
    "updated_at",
)
ATTEMPT_FILTER_COLUMNS = ("model", "problem_id", "dsl", "arm", "state", "outcome", "family")


@dataclass(frozen=True)
class Contains:
    """A filter value matching any text that contains it, ignoring ASCII case."""

    text: str


FilterValue = str | tuple[str, ...] | Contains  # equal to / one of / containing
AttemptFilters = dict[str, FilterValue]


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _filter_clause(column: str, value: FilterValue) -> tuple[str, list[Any]]:
    if isinstance(value, Contains):
        return f"{column} LIKE ? ESCAPE '\\'", [_like_pattern(value.text)]
    if isinstance(value, tuple):
        if not value:
            return "0", []
        return f"{column} IN ({', '.join('?' for _ in value)})", list(value)
    return f"{column} = ?", [value]


def _attempt_where(
    experiment_id: str | None, filters: AttemptFilters | None, search: str | None
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if experiment_id:
        clauses.append("experiment_id = ?")
        params.append(experiment_id)
    for column, value in (filters or {}).items():
        if column not in ATTEMPT_FILTER_COLUMNS:
            raise ValueError(f"cannot filter attempts by {column!r}")
        clause, values = _filter_clause(column, value)
        clauses.append(clause)
        params.extend(values)
    if search:
        clauses.append("(model || ' ' || problem_id || ' ' || arm || ' ' || state) LIKE ?")
        params.append(f"%{search}%")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def attempts_page(
    db: Database,
    *,
    experiment_id: str | None = None,
    filters: AttemptFilters | None = None,
    search: str | None = None,
    sort: str = "id",
    descending: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> list[AttemptRow]:
    """One page of attempts, filtered and sorted in SQL (never every row)."""
    if sort not in ATTEMPT_SORT_COLUMNS:
        raise ValueError(f"cannot sort attempts by {sort!r}")
    where, params = _attempt_where(experiment_id, filters, search)
    order = f"{sort} {'DESC' if descending else 'ASC'}, id ASC"
    return _rows(
        db,
        AttemptRow,
        f"SELECT * FROM attempts{where} ORDER BY {order} LIMIT ? OFFSET ?",
        [*params, limit, offset],
    )


def count_attempts(
    db: Database,
    *,
    experiment_id: str | None = None,
    filters: AttemptFilters | None = None,
    search: str | None = None,
) -> int:
    where, params = _attempt_where(experiment_id, filters, search)
    return int(db.execute(f"SELECT count(*) FROM attempts{where}", params).fetchone()[0])


def attempt(db: Database, attempt_id: int) -> AttemptRow | None:
    rows = _rows(db, AttemptRow, "SELECT * FROM attempts WHERE id=?", [attempt_id])
    return rows[0] if rows else None


def attempts_for_experiment(db: Database, experiment_id: str) -> list[AttemptRow]:
    return _rows(
        db, AttemptRow, "SELECT * FROM attempts WHERE experiment_id=? ORDER BY id", [experiment_id]
    )


def attempt_states(db: Database, experiment_id: str | None = None) -> dict[str, int]:
    """Number of attempts per state."""
    where, params = _attempt_where(experiment_id, None, None)
    return {
        row["state"]: row["n"]
        for row in db.query(
            f"SELECT state, count(*) AS n FROM attempts{where} GROUP BY state", params
        )
    }


def ungraded_reasons(db: Database, experiment_id: str) -> dict[str, int]:
    """Attempts stored ``ungraded`` (the grader failed, not the agent), per reason."""
    return {
        str(row["reason"]): row["n"]
        for row in db.query(
            "SELECT coalesce(reason, '') AS reason, count(*) AS n FROM attempts "
            "WHERE experiment_id = ? AND outcome = 'ungraded' GROUP BY reason ORDER BY reason",
            [experiment_id],
        )
    }


def scored_on_a_gpu(db: Database, experiment_id: str) -> bool:
    """The experiment is not marked PREVIEW and holds a scored pass (only a GPU gives one)."""
    row = db.execute(
        "SELECT 1 FROM experiments e WHERE e.id = ? AND e.preview = 0 AND EXISTS ("
        " SELECT 1 FROM submissions s JOIN attempts a ON a.id = s.attempt_id"
        " WHERE a.experiment_id = e.id AND s.verdict = 'pass')",
        [experiment_id],
    ).fetchone()
    return row is not None


def steps(db: Database, attempt_id: int, after_id: int = 0, limit: int = 1000) -> list[StepRow]:
    """Trajectory steps of an attempt with id > ``after_id`` (for incremental tailing)."""
    return _rows(
        db,
        StepRow,
        "SELECT *, try AS try_number FROM trajectory_steps WHERE attempt_id=? AND id>? "
        "ORDER BY try, step_index LIMIT ?",
        [attempt_id, after_id, limit],
    )


def submissions(db: Database, attempt_id: int) -> list[SubmissionRow]:
    return _rows(
        db,
        SubmissionRow,
        "SELECT *, try AS try_number FROM submissions WHERE attempt_id=? "
        "ORDER BY try, purpose DESC, n",
        [attempt_id],
    )


def pending_submissions(db: Database) -> list[SubmissionRow]:
    """Submissions not yet graded (queued, or running when a grader died)."""
    return _rows(
        db,
        SubmissionRow,
        "SELECT *, try AS try_number FROM submissions WHERE state != 'done' ORDER BY id",
    )


def final_feedback(db: Database, experiment_id: str) -> dict[int, dict[str, Any]]:
    """Each attempt's latest graded final evaluation (its feedback), by attempt id."""
    out: dict[int, dict[str, Any]] = {}
    for row in db.query(
        "SELECT s.attempt_id, s.feedback_json FROM submissions s "
        "JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ? AND s.purpose = 'final' AND s.feedback_json IS NOT NULL "
        "ORDER BY s.try, s.n, s.id",
        [experiment_id],
    ):
        try:
            out[row["attempt_id"]] = json.loads(row["feedback_json"])
        except (TypeError, ValueError):
            continue  # an unreadable record adds nothing; the attempt row still counts
    return out


def unverdicted_finals(db: Database, experiment_id: str) -> dict[int, str]:
    """Attempts stored ``fail`` whose last final evaluation never got a verdict (every
    grading job of it ended in an error: the grader failed, not the agent), with the last
    job's error, by attempt id. Stores written before ``ungraded`` existed hold such rows
    (migration m009 turns them ``ungraded``; a read-only analysis names them so too)."""
    rows = db.execute(
        "SELECT a.id, (SELECT g.error FROM grading_jobs g WHERE g.submission_id = s.id "
        "ORDER BY g.id DESC LIMIT 1) FROM attempts a JOIN submissions s ON s.id = ("
        "SELECT id FROM submissions WHERE attempt_id = a.id AND purpose = 'final' "
        "ORDER BY try DESC, n DESC LIMIT 1) "
        "WHERE a.experiment_id = ? AND a.outcome = 'fail' AND a.state = 'finished' "
        "AND NOT EXISTS (SELECT 1 FROM grading_jobs g WHERE g.submission_id = s.id "
        "AND g.state = 'done') AND EXISTS (SELECT 1 FROM grading_jobs g "
        "WHERE g.submission_id = s.id AND g.state = 'error')",
        [experiment_id],
    ).fetchall()
    return {int(attempt_id): str(error or "") for attempt_id, error in rows}


def latest_skill(db: Database, attempt_id: int) -> SkillRow | None:
    rows = _rows(
        db,
        SkillRow,
        "SELECT * FROM skills WHERE attempt_id=? ORDER BY id DESC LIMIT 1",
        [attempt_id],
    )
    return rows[0] if rows else None


def skill(db: Database, skill_id: int) -> SkillRow | None:
    rows = _rows(db, SkillRow, "SELECT * FROM skills WHERE id=?", [skill_id])
    return rows[0] if rows else None


def skills_of(db: Database, attempt_id: int) -> list[SkillRow]:
    """Every version of an attempt's SKILL.md, oldest first (one row per change seen)."""
    return _rows(db, SkillRow, "SELECT * FROM skills WHERE attempt_id=? ORDER BY id", [attempt_id])


def implementation(db: Database, attempt_id: int) -> str | None:
    """An attempt's implementation: the final source collected at its end, else its latest
    final evaluation's, else its latest submission's source (None: nothing submitted)."""
    row = db.execute("SELECT final_source FROM attempts WHERE id=?", [attempt_id]).fetchone()
    if row is not None and row[0]:
        return str(row[0])
    row = db.execute(
        "SELECT source FROM submissions WHERE attempt_id=? "
        "ORDER BY try DESC, purpose = 'final' DESC, n DESC, id DESC LIMIT 1",
        [attempt_id],
    ).fetchone()
    return str(row[0]) if row is not None else None


def comparisons(
    db: Database, experiment_id: str | None = None, *, resolved_only: bool = False
) -> list[ComparisonRow]:
    clauses: list[str] = []
    params: list[Any] = []
    if experiment_id:
        clauses.append("experiment_id=?")
        params.append(experiment_id)
    if resolved_only:
        clauses.append("resolved=1")
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return _rows(
        db,
        ComparisonRow,
        f"SELECT * FROM comparisons{where} ORDER BY model, problem_id, direction, replicate",
        params,
    )


def comparison(db: Database, comparison_id: int) -> ComparisonRow | None:
    rows = _rows(db, ComparisonRow, "SELECT * FROM comparisons WHERE id=?", [comparison_id])
    return rows[0] if rows else None


def labels(
    db: Database, *, task: str | None = None, subject_id: int | None = None
) -> list[LabelRow]:
    clauses: list[str] = []
    params: list[Any] = []
    if task:
        clauses.append("task=?")
        params.append(task)
    if subject_id is not None:
        clauses.append("subject_id=?")
        params.append(subject_id)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return _rows(db, LabelRow, f"SELECT * FROM labels{where} ORDER BY id", params)


def events_after(
    db: Database, after_id: int = 0, *, experiment_id: str | None = None, limit: int = 1000
) -> list[EventRow]:
    """Events with id > ``after_id`` in id order: how another process tails a run."""
    if experiment_id:
        return _rows(
            db,
            EventRow,
            "SELECT * FROM events WHERE id>? AND (experiment_id=? OR experiment_id IS NULL) "
            "ORDER BY id LIMIT ?",
            [after_id, experiment_id, limit],
        )
    return _rows(
        db, EventRow, "SELECT * FROM events WHERE id>? ORDER BY id LIMIT ?", [after_id, limit]
    )


def last_event_id(db: Database) -> int:
    return int(db.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0])
