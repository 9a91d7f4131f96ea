"""An attempt's records in the store: the skill it runs with, and how it ended.

The scheduler decides when; these functions say what is written, each in one transaction.
"""

from __future__ import annotations

from typing import Any

from engine.attempts.spec import AttemptOutcome
from engine.grading.admission import INFRA_JUDGE_CRASH, UNGRADED_REASONS, admit
from engine.grading.api import Feedback
from engine.plan import PlanNode
from storage import queries, writes
from storage.db import now
from storage.store import Store

UNGRADED = "ungraded"  # no result, by our fault: the grader, the sandbox or the endpoint failed
# why an attempt that ended ``failed`` before any final verdict is no result (ours, never the
# agent's): its sandbox (an invalid try), its task build, or the model endpoint failed
INFRA_SANDBOX = "infra.sandbox"
INFRA_TASK_BUILD = "infra.task_build"
INFRA_ENDPOINT = "infra.model_endpoint"
# how the attempt runner names those failures in ``AttemptOutcome.error``
_FAILED_PREFIXES = (("task build:", INFRA_TASK_BUILD), ("scenario:", INFRA_ENDPOINT))
# what a store written before these reasons holds for such an attempt
LEGACY_INFRASTRUCTURE = "infrastructure"


def outcome_of(final: Feedback | None) -> tuple[str, str | None]:
    """Attempt outcome and reason from its final evaluation: ``ungraded`` with the reason
    when the grader failed (an ``infra.*`` error, an invalid timing), never ``fail``."""
    if final is None:
        return "fail", "no_implementation"
    final = admit(final)
    if final.verdict in ("pass", "preview"):
        return final.verdict, None
    if final.verdict == "error" or final.reason in UNGRADED_REASONS:
        return UNGRADED, final.reason or INFRA_JUDGE_CRASH
    return "fail", final.reason or final.verdict


def regrades_final(state: str, outcome: str | None, reason: str | None) -> bool:
    """Whether an operator's retry re-grades the attempt's stored final instead of running
    its agent again: it ended ``ungraded`` because its final grading failed for the grader's
    own reasons (an ``infra.*`` error, ``usage``, ``timing.invalid``), its agent's work done.
    An attempt without a final (its sandbox, task build or model endpoint failed) runs again."""
    return state in ("finished", "failed") and outcome == UNGRADED and reason in UNGRADED_REASONS


def failed_outcome(outcome: AttemptOutcome) -> tuple[str, str]:
    """Outcome and reason of an attempt that ended ``failed``: ``ungraded`` with an ``infra.*``
    reason (its final's grader kept failing, its sandbox or task build failed, the model
    endpoint failed), never ``fail``: our failure is never the agent's result."""
    final = outcome.final_feedback
    if final is not None:
        verdict, reason = outcome_of(final)
        if verdict == UNGRADED:
            return verdict, reason or INFRA_JUDGE_CRASH
    return UNGRADED, failed_reason(outcome.error)


def failed_reason(error: str | None) -> str:
    """The ``infra.*`` reason of a ``failed`` attempt without a final, from its error."""
    for prefix, reason in _FAILED_PREFIXES:
        if (error or "").startswith(prefix):
            return reason
    return INFRA_SANDBOX


def _edited_skill(db: Any, text: str, source_attempt_id: int) -> int:
    """The edited skill to attach, with its lineage: it descends from the source
    attempt's skill (a person's edit saved from the TUI is reused, not copied)."""
    parent = queries.latest_skill(db, source_attempt_id)
    return writes.ensure_edited_skill(db, text, parent.id if parent else None)


async def attach_skill(store: Store, node: PlanNode, attempt_id: int, source_id: int) -> None:
    """Record which skill a treatment runs with, and whose attempt it came from."""
    skill_id: int | None
    if node.edited_skill is not None:
        current = await store.read(queries.attempt, attempt_id)
        if current is not None and current.attached_skill_id is not None:
            skill_id = current.attached_skill_id
        else:
            skill_id = await store.write(_edited_skill, node.edited_skill, source_id)
    else:
        src = await store.read(queries.latest_skill, source_id)
        skill_id = src.id if src else None
    await store.write(
        writes.update_attempt,
        attempt_id,
        attached_skill_id=skill_id,
        source_attempt_id=source_id,
    )


def store_outcome(
    db: Any,
    attempt_id: int,
    outcome: AttemptOutcome,
    *,
    state: str,
    verdict: str,
    reason: str | None,
) -> None:
    """The collected skill and the attempt row's end, in one transaction."""
    if outcome.skill and outcome.skill.strip():
        latest = queries.latest_skill(db, attempt_id)
        if latest is None or latest.text != outcome.skill:
            writes.add_skill(db, outcome.skill, attempt_id=attempt_id)
    final = outcome.final_feedback
    writes.update_attempt(
        db,
        attempt_id,
        state=state,
        outcome=verdict,
        reason=reason,
        speedup=final.speedup if final else None,
        impl_median_ms=final.impl_median_ms if final else None,
        eager_median_ms=final.eager_median_ms if final else None,
        final_source=outcome.final_source,
        tokens_in=outcome.input_tokens,
        tokens_out=outcome.output_tokens,
        cost_usd=outcome.cost_usd or 0.0,
        agent_seconds=outcome.agent_seconds,
        error=outcome.error,
        ended_at=now(),
    )
