"""Plain write functions taking a ``Database``; run them through ``Store.write``.

Each state change that a viewer cares about also appends a row to ``events`` in the same
transaction, so another process tailing ``events`` by id never sees an event before its data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlite_utils import Database

from storage.db import now
from storage.event_rows import append_event, append_events, text_hash
from storage.skill_writes import add_label, add_skill, ensure_edited_skill

__all__ = [
    "ACTIVE_STATES",
    "add_label",
    "add_skill",
    "add_step",
    "add_submission",
    "append_event",
    "append_events",
    "create_experiment",
    "ensure_attempt",
    "ensure_edited_skill",
    "finish_grading_job",
    "interrupt_running_gradings",
    "interrupt_active",
    "mark_experiment_preview",
    "set_experiment_state",
    "start_grading_job",
    "text_hash",
    "update_attempt",
    "upsert_comparison",
]

ACTIVE_STATES = ("queued", "running", "final_eval")  # an attempt in flight
_ATTEMPT_UPDATABLE = {
    "state",
    "outcome",
    "reason",
    "speedup",
    "impl_median_ms",
    "eager_median_ms",
    "best_speedup",
    "submissions_used",
    "tries",
    "task_hash",
    "skill_hash",
    "attached_skill_id",
    "stop_reason",
    "source_attempt_id",
    "variant",
    "final_source",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "agent_seconds",
    "error",
    "started_at",
    "ended_at",
    "budget_s",
    "unsafe_no_jail",
}


def create_experiment(
    db: Database,
    experiment_id: str,
    name: str,
    *,
    config_toml: str = "",
    preview: bool = False,
    grading_backend: str = "local",
    gpu: str = "h200",
) -> None:
    """Create the experiment row, or refresh its config if it exists (runs are convergent);
    ``gpu`` is the grading target it is graded on (``problems/targets.py``)."""
    stamp = now()
    existing = db.execute("SELECT 1 FROM experiments WHERE id = ?", [experiment_id]).fetchone()
    if existing:
        db.execute(
            "UPDATE experiments SET name=?, config_toml=?, config_hash=?, preview=?, "
            "grading_backend=?, gpu=?, updated_at=? WHERE id=?",
            [
                name,
                config_toml,
                text_hash(config_toml),
                int(preview),
                grading_backend,
                gpu,
                stamp,
                experiment_id,
            ],
        )
        return
    db.table("experiments").insert(
        {
            "id": experiment_id,
            "name": name,
            "config_toml": config_toml,
            "config_hash": text_hash(config_toml),
            "state": "planned",
            "preview": int(preview),
            "grading_backend": grading_backend,
            "gpu": gpu,
            "created_at": stamp,
            "updated_at": stamp,
        }
    )
    append_event(db, "experiment_created", {"name": name}, experiment_id=experiment_id)


def mark_experiment_preview(db: Database, experiment_id: str) -> None:
    """Label an experiment PREVIEW (some verdict came from CPU preview grading)."""
    db.execute("UPDATE experiments SET preview=1, updated_at=? WHERE id=?", [now(), experiment_id])
    append_event(db, "experiment_preview", {}, experiment_id=experiment_id)


def set_experiment_state(db: Database, experiment_id: str, state: str) -> None:
    db.execute(
        "UPDATE experiments SET state=?, updated_at=? WHERE id=?", [state, now(), experiment_id]
    )
    append_event(db, "experiment_state", {"state": state}, experiment_id=experiment_id)


def ensure_attempt(db: Database, experiment_id: str, plan_key: str, **fields: Any) -> int:
    """Insert a planned attempt unless one with this plan key exists; returns its id.

    The (experiment, plan key) pair is unique, so replanning never duplicates an attempt.
    """
    row = db.execute(
        "SELECT id FROM attempts WHERE experiment_id=? AND plan_key=?", [experiment_id, plan_key]
    ).fetchone()
    if row:
        return int(row[0])
    stamp = now()
    record = {
        "experiment_id": experiment_id,
        "plan_key": plan_key,
        "state": "planned",
        "created_at": stamp,
        "updated_at": stamp,
        **fields,
    }
    attempt_id = int(db.table("attempts").insert(record).last_pk)  # type: ignore[arg-type]
    append_event(
        db,
        "attempt_planned",
        {k: fields.get(k) for k in ("model", "problem_id", "dsl", "arm", "replicate")},
        experiment_id=experiment_id,
        attempt_id=attempt_id,
    )
    return attempt_id


def update_attempt(db: Database, attempt_id: int, event: str | None = None, **fields: Any) -> None:
    """Update attempt columns (only known ones) and optionally append an event."""
    unknown = set(fields) - _ATTEMPT_UPDATABLE
    if unknown:
        raise ValueError(f"unknown attempt fields: {sorted(unknown)}")
    if fields:
        columns = ", ".join(f"{k}=?" for k in fields)
        db.execute(
            f"UPDATE attempts SET {columns}, updated_at=? WHERE id=?",
            [*fields.values(), now(), attempt_id],
        )
    if event:
        exp = db.execute("SELECT experiment_id FROM attempts WHERE id=?", [attempt_id]).fetchone()
        payload = {k: v for k, v in fields.items() if k != "final_source"}
        append_event(
            db, event, payload, experiment_id=exp[0] if exp else None, attempt_id=attempt_id
        )


def interrupt_active(
    db: Database, experiment_id: str, error: str, *, ended_at: str | None = None
) -> list[int]:
    """Mark the experiment's attempts still queued, running or in final evaluation as
    interrupted (one ``attempt_interrupted`` event each); returns their ids."""
    marks = ", ".join("?" for _ in ACTIVE_STATES)
    ids = [
        int(row[0])
        for row in db.execute(
            f"SELECT id FROM attempts WHERE experiment_id=? AND state IN ({marks}) ORDER BY id",
            [experiment_id, *ACTIVE_STATES],
        ).fetchall()
    ]
    fields: dict[str, Any] = {"state": "interrupted", "error": error}
    if ended_at is not None:
        fields["ended_at"] = ended_at
    for attempt_id in ids:
        update_attempt(db, attempt_id, "attempt_interrupted", **fields)
    return ids


def add_step(
    db: Database,
    attempt_id: int,
    step_index: int,
    *,
    try_number: int = 1,
    source: str = "agent",
    analysis: str = "",
    plan: str = "",
    keystrokes: str = "",
    terminal_output: str = "",
    message: str = "",
    tokens_in: int = 0,
    tokens_out: int = 0,
) -> int:
    """Record one trajectory step (idempotent on attempt/try/index: a re-sent step replaces)."""
    db.execute(
        "INSERT INTO trajectory_steps (attempt_id, try, step_index, source, analysis, plan, "
        "keystrokes, terminal_output, message, tokens_in, tokens_out, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (attempt_id, try, step_index) DO UPDATE SET source=excluded.source, "
        "analysis=excluded.analysis, plan=excluded.plan, keystrokes=excluded.keystrokes, "
        "terminal_output=excluded.terminal_output, message=excluded.message, "
        "tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out",
        [
            attempt_id,
            try_number,
            step_index,
            source,
            analysis,
            plan,
            keystrokes,
            terminal_output,
            message,
            tokens_in,
            tokens_out,
            now(),
        ],
    )
    step_id = db.execute(
        "SELECT id FROM trajectory_steps WHERE attempt_id=? AND try=? AND step_index=?",
        [attempt_id, try_number, step_index],
    ).fetchone()[0]
    append_event(
        db, "step_recorded", {"step_id": step_id, "step_index": step_index}, attempt_id=attempt_id
    )
    return int(step_id)


def add_submission(
    db: Database,
    attempt_id: int,
    n: int,
    source: str,
    *,
    purpose: str = "submission",
    try_number: int = 1,
) -> int:
    """Record a snapshot to grade; idempotent on (attempt, try, purpose, n). Returns its id."""
    row = db.execute(
        "SELECT id FROM submissions WHERE attempt_id=? AND try=? AND purpose=? AND n=?",
        [attempt_id, try_number, purpose, n],
    ).fetchone()
    if row:
        return int(row[0])
    sub_id = int(
        db.table("submissions")
        .insert(
            {
                "attempt_id": attempt_id,
                "try": try_number,
                "purpose": purpose,
                "n": n,
                "source": source,
                "source_hash": text_hash(source),
                "state": "queued",
                "submitted_at": now(),
            }
        )
        .last_pk  # type: ignore[arg-type]
    )
    if purpose == "submission":
        db.execute(
            "UPDATE attempts SET submissions_used=max(submissions_used, ?), updated_at=? "
            "WHERE id=?",
            [n, now(), attempt_id],
        )
    append_event(
        db,
        "submission_received",
        {"submission_id": sub_id, "n": n, "purpose": purpose},
        attempt_id=attempt_id,
    )
    return sub_id


def start_grading_job(db: Database, submission_id: int, backend: str, worker: str = "") -> int:
    """Open a grading job (a new try) for a submission and mark the submission running."""
    tries = db.execute(
        "SELECT count(*) FROM grading_jobs WHERE submission_id=?", [submission_id]
    ).fetchone()[0]
    stamp = now()
    job_id = int(
        db.table("grading_jobs")
        .insert(
            {
                "submission_id": submission_id,
                "backend": backend,
                "worker": worker,
                "state": "running",
                "try": tries + 1,
                "queued_at": stamp,
                "started_at": stamp,
            }
        )
        .last_pk  # type: ignore[arg-type]
    )
    db.execute("UPDATE submissions SET state='running' WHERE id=?", [submission_id])
    return job_id


def finish_grading_job(
    db: Database, job_id: int, feedback: Mapping[str, Any] | None, error: str | None = None
) -> None:
    """Close a grading job; with feedback, record it on the submission (graded exactly once)."""
    state = "error" if feedback is None or feedback.get("verdict") == "error" else "done"
    message = None
    if state == "error":
        message = error or (feedback or {}).get("message") or "grading failed"
    db.execute(
        "UPDATE grading_jobs SET state=?, error=?, finished_at=? WHERE id=?",
        [state, message, now(), job_id],
    )
    sub_id, attempt_id = db.execute(
        "SELECT g.submission_id, s.attempt_id FROM grading_jobs g "
        "JOIN submissions s ON s.id = g.submission_id WHERE g.id=?",
        [job_id],
    ).fetchone()
    if state == "error":
        db.execute("UPDATE submissions SET state='queued' WHERE id=? AND state!='done'", [sub_id])
        return
    assert feedback is not None
    db.execute(
        "UPDATE submissions SET state='done', verdict=?, reason=?, speedup=?, impl_median_ms=?, "
        "eager_median_ms=?, feedback_json=?, graded_at=? WHERE id=? AND state!='done'",
        [
            feedback.get("verdict"),
            feedback.get("reason"),
            feedback.get("speedup"),
            feedback.get("impl_median_ms"),
            feedback.get("eager_median_ms"),
            json.dumps(dict(feedback), default=str),
            now(),
            sub_id,
        ],
    )
    if feedback.get("speedup") is not None and feedback.get("verdict") in ("pass", "preview"):
        db.execute(
            "UPDATE attempts SET best_speedup=max(coalesce(best_speedup, 0), ?) WHERE id=?",
            [feedback["speedup"], attempt_id],
        )
    append_event(
        db,
        "submission_graded",
        {
            "submission_id": sub_id,
            "verdict": feedback.get("verdict"),
            "reason": feedback.get("reason"),
            "speedup": feedback.get("speedup"),
        },
        attempt_id=attempt_id,
    )


def interrupt_running_gradings(db: Database, experiment_id: str, error: str) -> int:
    """Close the experiment's gradings left running by a process that stopped (state error,
    ``error`` says why) and queue their submissions again; returns how many."""
    subs = (
        "SELECT s.id FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ?"
    )
    cur = db.execute(
        f"UPDATE grading_jobs SET state='error', error=?, finished_at=? "
        f"WHERE state='running' AND submission_id IN ({subs})",
        [error, now(), experiment_id],
    )
    db.execute(
        f"UPDATE submissions SET state='queued' WHERE state='running' AND id IN ({subs})",
        [experiment_id],
    )
    return cur.rowcount


def upsert_comparison(db: Database, experiment_id: str, **fields: Any) -> None:
    """Insert or refresh one comparison (unique per model/problem/direction/replicate/round)."""
    record = {"experiment_id": experiment_id, "updated_at": now(), **fields}
    record.setdefault("round", 0)
    record.setdefault("variant", "")
    columns = ", ".join(record)
    marks = ", ".join("?" for _ in record)
    keys = ("experiment_id", "model", "problem_id", "direction", "replicate", "round", "variant")
    updates = ", ".join(f"{k}=excluded.{k}" for k in record if k not in keys)
    db.execute(
        f"INSERT INTO comparisons ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}",
        list(record.values()),
    )
    append_event(
        db,
        "comparison_updated",
        {k: fields.get(k) for k in ("model", "problem_id", "direction", "rho", "verdict")},
        experiment_id=experiment_id,
    )
