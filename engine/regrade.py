"""An operator's retry of an attempt its grader failed: its stored final is graded again; the
agent does not run again.

An attempt stored ``ungraded`` because its final grading failed for the grader's own reasons
(:func:`~engine.attempt_records.regrades_final`: an ``infra.*`` error, ``usage``,
``timing.invalid``) has its agent's work on record: the final submission of its last try.
``retry`` on it (``engine/control.py``) queues a re-grade in the scheduler, which runs it in
place of the attempt (:func:`regrade_final`):

- one new grading of that submission (same source): a new ``grading_jobs`` row per try, the
  earlier rows kept, through the engine's backend, grading gate and retry policy (a
  deterministic error is tried once);
- the attempt's outcome, reason, runtimes and speedup become :func:`outcome_of` of the new
  feedback (pass, fail, or ungraded again), written in the transaction that marks the command
  ``applied`` with what the earlier result was and what the re-grade gave;
- then the usual path: repeated finals queued if it passes, comparisons recomputed, a paired
  job started for a comparison that resolved.

A killed engine leaves the command ``applying``; the next engine on the experiment applies it
again. The first application records, in the command's arguments, the last grading job of
the submission before the re-grade (``after_job``) and the earlier result; a later
application that finds a job after it ``done`` (its verdict stored) applies that verdict
instead of grading again, and closes a job a killed engine left ``running``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.attempt_records import UNGRADED, outcome_of
from engine.events import AttemptFinished
from engine.grading.api import Feedback, GradeRequest
from engine.recording import RecordingBackend
from storage import controls, queries, writes
from storage.controls import Command

if TYPE_CHECKING:
    from engine.plan import PlanNode
    from engine.scheduler import Engine

REGRADED = "regraded"  # what the scheduler's task of a re-grade returns
KILLED_JOB = "the engine stopped before this grading ended (re-graded again)"


@dataclass(frozen=True)
class Opened:
    """The final submission a re-grade grades, and what a killed engine left of it."""

    submission_id: int
    n: int
    source: str
    try_number: int
    earlier: dict[str, Any]
    stored: dict[str, Any] | None  # the feedback of a re-grade that stored its verdict


def final_submission(db: Any, attempt_id: int, try_number: int) -> tuple[int, int, str] | None:
    """(id, n, source) of the final submission of an attempt's try, graded or not."""
    row = db.execute(
        "SELECT id, n, source FROM submissions WHERE attempt_id = ? AND try = ? AND "
        "purpose = 'final' ORDER BY n DESC LIMIT 1",
        [attempt_id, try_number],
    ).fetchone()
    return (int(row[0]), int(row[1]), str(row[2])) if row else None


def _earlier(db: Any, row: queries.AttemptRow, submission_id: int) -> dict[str, Any]:
    """The attempt's result before the re-grade, with its final grading's verdict."""
    graded = db.execute(
        "SELECT verdict, reason, impl_median_ms, feedback_json FROM submissions WHERE id = ?",
        [submission_id],
    ).fetchone()
    message = json.loads(graded[3]).get("message") if graded[3] else None
    if message is None:  # never graded: the last job's error says why
        error = db.execute(
            "SELECT error FROM grading_jobs WHERE submission_id = ? ORDER BY id DESC LIMIT 1",
            [submission_id],
        ).fetchone()
        message = error[0] if error else None
    return {
        "try": row.tries, "state": row.state, "outcome": row.outcome, "reason": row.reason,
        "speedup": row.speedup, "impl_median_ms": row.impl_median_ms, "error": row.error,
        "final": {"verdict": graded[0], "reason": graded[1], "impl_median_ms": graded[2],
                  "message": str(message)[:500] if message else None},
    }


def open_regrade(db: Any, command_id: int, owner: str) -> Opened | None:
    """Start (or take up again) a re-grade; None when ``owner`` no longer holds the command
    or the attempt has no final submission."""
    state, claimed_by, attempt_id, args_json = db.execute(
        "SELECT state, claimed_by, attempt_id, args_json FROM control_commands WHERE id = ?",
        [command_id],
    ).fetchone()
    row = queries.attempt(db, attempt_id or 0)
    final = final_submission(db, row.id, row.tries) if row else None
    if state != "applying" or claimed_by != owner or row is None or final is None:
        return None
    submission_id, n, source = final
    args = json.loads(args_json or "{}")
    if "after_job" not in args:  # the first application: what the re-grade replaces
        last = db.execute(
            "SELECT max(id) FROM grading_jobs WHERE submission_id = ?", [submission_id]
        ).fetchone()[0]
        args.update(after_job=int(last or 0), earlier=_earlier(db, row, submission_id))
        db.execute("UPDATE control_commands SET args_json = ? WHERE id = ?",
                   [json.dumps(args), command_id])
    after = int(args["after_job"])
    done = db.execute(
        "SELECT 1 FROM grading_jobs WHERE submission_id = ? AND id > ? AND state = 'done'",
        [submission_id, after],
    ).fetchone()
    stored = None
    if done is not None:
        feedback = db.execute(
            "SELECT feedback_json FROM submissions WHERE id = ?", [submission_id]
        ).fetchone()[0]
        stored = json.loads(feedback)
    db.execute(  # a killed engine's grading never ends: closed, never taken as a verdict
        "UPDATE grading_jobs SET state = 'error', error = ?, finished_at = coalesce("
        "finished_at, started_at) WHERE submission_id = ? AND id > ? AND state = 'running'",
        [KILLED_JOB, submission_id, after],
    )
    return Opened(submission_id, n, source, row.tries, dict(args["earlier"]), stored)


def _result(verdict: str, reason: str | None, feedback: Feedback) -> dict[str, Any]:
    return {"outcome": verdict, "reason": reason, "speedup": feedback.speedup,
            "impl_median_ms": feedback.impl_median_ms}


def record_regrade(db: Any, command: Command, owner: str, opened: Opened,
                   feedback: Feedback) -> bool:
    """The re-grade's effect, in the transaction of the command's ``applied`` mark: the
    attempt's outcome from the new feedback, the command's outcome linking both results."""
    verdict, reason = outcome_of(feedback)
    outcome = (f"final of try {opened.try_number} re-graded: "
               f"{json.dumps(_result(verdict, reason, feedback))}; "
               f"earlier: {json.dumps(opened.earlier)}")
    if not controls.mark(db, command.id, "applied", outcome, owner):
        return False
    fields: dict[str, Any] = {"state": "finished", "error": None} if verdict != UNGRADED else {}
    writes.update_attempt(
        db, command.attempt_id or 0, outcome=verdict, reason=reason, speedup=feedback.speedup,
        impl_median_ms=feedback.impl_median_ms, eager_median_ms=feedback.eager_median_ms,
        **fields,
    )
    return True


async def _grade(engine: Engine, node: PlanNode, command: Command, opened: Opened) -> Feedback:
    """One new grading of the stored final: each try a new job of the same submission."""
    attempt_id = command.attempt_id or 0
    backend = RecordingBackend(
        engine.repeats.ticker,
        engine.publisher,
        experiment_id=engine.config.id,
        attempt_id=attempt_id,
        try_number=opened.try_number,
        gate=engine.gate,
    )
    request = GradeRequest(node.problem_id, node.dsl, opened.source, purpose="final",
                           request_id=f"{attempt_id}-final-regrade-{command.id}")
    backend.resume_submission(request, opened.n, opened.submission_id)
    return await engine.retry.grade(backend, request)


async def regrade_final(engine: Engine, node: PlanNode, command: Command) -> str:
    """Re-grade an attempt's stored final for an operator's retry (the scheduler runs it in
    place of the attempt); the command ends ``applied``, or ``failed`` on a bug."""
    attempt_id = command.attempt_id or 0
    try:
        opened = await engine.store.write(open_regrade, command.id, engine.owner)
        if opened is None:  # another engine holds it now, or the final went away
            await engine.store.write(controls.mark, command.id, "refused",
                                     "no final submission to re-grade", engine.owner)
            return REGRADED
        feedback = (Feedback.from_dict(opened.stored) if opened.stored is not None
                    else await _grade(engine, node, command, opened))
        verdict, reason = outcome_of(feedback)
        state = "finished" if verdict != UNGRADED else opened.earlier["state"]
        applied = await engine.publisher.publish(
            AttemptFinished(engine.config.id, attempt_id, state=state, outcome=verdict,
                            reason=reason, speedup=feedback.speedup),
            record_regrade, command, engine.owner, opened, feedback,
        )
        if applied:
            await engine.after_final(node, attempt_id, state, feedback)
    except Exception as exc:  # noqa: BLE001 - a failed re-grade must not stop the run
        with contextlib.suppress(Exception):
            await engine.store.write(controls.mark, command.id, "failed",
                                     f"{type(exc).__name__}: {exc}", engine.owner)
    finally:
        engine.control.regrading.discard(attempt_id)
    return REGRADED
