"""LLM annotation runs: every subject × annotator, validated replies, retries, stored usage.

Each call goes through ``litellm.acompletion``. A reply that fails validation is sent back to
the annotator with the reason (so a scripted or real model sees its own reply and the
correction); an HTTP or transport error is retried as is. After ``tries`` failed tries the
item is recorded as an ``annotation_failed`` event (with every raw reply) and the run moves
on: a bad reply never stops a run. Successful labels keep the accepted raw reply; the call's
tokens and cost (all tries) are stored on the first label of the reply.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlite_utils import Database

from engine.rubric import prompts, subjects
from engine.rubric.model import Rubric, default_rubric
from engine.rubric.prompts import Label, ReplyError
from storage import queries, writes
from storage.store import Store

TASKS = ("skill", "uptake", "cause")
DEFAULT_TRIES = 3
Completion = Callable[..., Awaitable[Any]]


@dataclass
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


@dataclass
class AnnotationResult:
    """The result of annotating one subject with one annotator."""

    subject: subjects.Subject
    annotator: str
    labels: list[Label]
    raw_replies: list[str]
    usage: Usage
    error: str | None = None


@dataclass
class RunSummary:
    done: int = 0
    failed: int = 0
    skipped: int = 0
    usage: Usage = field(default_factory=Usage)
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Annotator:
    """A model reached through litellm, e.g. ``openai/gpt-x`` with an OpenAI-compatible base."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    timeout_s: float = 300.0


def _reply_text(response: Any) -> str:
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return ""
    content = getattr(message, "content", None)
    if not content:
        refusal = getattr(message, "refusal", None)
        return str(refusal) if refusal else ""
    return str(content)


def _usage(response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    out = Usage(int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0))
    try:
        import litellm

        out.cost_usd = float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # noqa: BLE001 - unknown models have no price
        out.cost_usd = 0.0
    return out


def default_completion() -> Completion:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm.acompletion


async def ask(
    annotator: Annotator,
    messages: list[dict[str, str]],
    parse: Callable[[str], list[Label]],
    *,
    completion: Completion,
    tries: int = DEFAULT_TRIES,
) -> tuple[list[Label] | None, list[str], Usage, str | None]:
    """Ask until a reply parses (at most ``tries`` calls): (labels, raw replies, usage, error)."""
    conversation = list(messages)
    raws: list[str] = []
    total = Usage()
    error: str | None = None
    for _ in range(tries):
        kwargs: dict[str, Any] = {"model": annotator.model, "messages": conversation,
                                  "temperature": 0.0, "timeout": annotator.timeout_s,
                                  "num_retries": 0, "max_retries": 0}
        if annotator.api_base:
            kwargs["api_base"] = annotator.api_base
        if annotator.api_key:
            kwargs["api_key"] = annotator.api_key
        try:
            response = await completion(**kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - provider errors are retried, then recorded
            error = f"call failed: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        used = _usage(response)
        total.tokens_in += used.tokens_in
        total.tokens_out += used.tokens_out
        total.cost_usd += used.cost_usd
        text = _reply_text(response)
        raws.append(text)
        try:
            return parse(text), raws, total, None
        except ReplyError as exc:
            error = f"invalid reply: {exc}"
            conversation = [*conversation, {"role": "assistant", "content": text},
                            {"role": "user", "content": f"Your reply was rejected: {exc}. "
                             "Reply again with only the JSON object."}]
    return None, raws, total, error


def _already_labelled(db: Database, subject: subjects.Subject, annotator: str,
                      rubric_hash: str) -> bool:
    row = db.execute(
        "SELECT 1 FROM labels WHERE task=? AND subject_type=? AND subject_id=? AND annotator=? "
        "AND rubric_hash=? LIMIT 1",
        [subject.task, subject.subject_type, subject.subject_id, annotator, rubric_hash],
    ).fetchone()
    return row is not None


def _request(db: Database, rubric: Rubric, subject: subjects.Subject
             ) -> tuple[list[dict[str, str]], Callable[[str], list[Label]]]:
    """Messages and reply parser for one subject (read on a store reader thread)."""
    if subject.task == "skill":
        skill = queries.skill(db, subject.subject_id)
        text = skill.text if skill else ""
        return (prompts.skill_messages(rubric, text),
                lambda reply: prompts.parse_skill(rubric, reply, text))
    if subject.task == "uptake":
        material = subjects.attempt_material(db, subject.subject_id)
        has_own = bool(material.own_skill.strip())
        return (prompts.uptake_messages(rubric, material),
                lambda reply: prompts.parse_uptake(rubric, reply, has_own_skill=has_own))
    comp = queries.comparison(db, subject.subject_id)
    if comp is None or comp.treatment_attempt_id is None:
        raise LookupError(f"no comparison {subject.subject_id} with a treatment")
    material = subjects.attempt_material(db, comp.treatment_attempt_id)
    summary, baseline = subjects.comparison_summary(db, comp)
    return (prompts.cause_messages(rubric, summary, material, baseline),
            lambda reply: prompts.parse_cause(rubric, reply))


def _record(db: Database, outcome: AnnotationResult, rubric_hash: str) -> None:
    s = outcome.subject
    if outcome.error is not None:
        writes.append_event(db, "annotation_failed", {
            "task": s.task, "subject_type": s.subject_type, "subject_id": s.subject_id,
            "annotator": outcome.annotator, "error": outcome.error,
            "raw_replies": outcome.raw_replies, "tokens_in": outcome.usage.tokens_in,
            "tokens_out": outcome.usage.tokens_out, "cost_usd": outcome.usage.cost_usd})
        return
    for i, label in enumerate(outcome.labels):
        first = i == 0
        writes.add_label(
            db, task=s.task, subject_type=s.subject_type, subject_id=s.subject_id,
            category=label.category, value=label.value, annotator=outcome.annotator,
            annotator_kind="llm", evidence=label.evidence, rubric_hash=rubric_hash,
            raw_reply=outcome.raw_replies[-1] if outcome.raw_replies else None,
            tokens_in=outcome.usage.tokens_in if first else 0,
            tokens_out=outcome.usage.tokens_out if first else 0,
            cost_usd=outcome.usage.cost_usd if first else 0.0)


def list_subjects(db: Database, task: str, experiment_id: str | None) -> list[subjects.Subject]:
    finder = {"skill": subjects.skill_subjects, "uptake": subjects.uptake_subjects,
              "cause": subjects.cause_subjects}[task]
    return finder(db, experiment_id)


async def annotate(
    store: Store,
    annotators: Sequence[Annotator],
    *,
    tasks: Sequence[str] = TASKS,
    experiment_id: str | None = None,
    rubric: Rubric | None = None,
    completion: Completion | None = None,
    tries: int = DEFAULT_TRIES,
    concurrency: int = 4,
    force: bool = False,
    on_outcome: Callable[[AnnotationResult], None] | None = None,
) -> RunSummary:
    """Label every subject of ``tasks`` with every annotator; returns counts and usage."""
    rubric = rubric or default_rubric()
    completion = completion or default_completion()
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown annotation tasks {unknown}; expected {', '.join(TASKS)}")
    summary = RunSummary()
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(subject: subjects.Subject, annotator: Annotator) -> None:
        async with gate:
            if not force and await store.read(_already_labelled, subject, annotator.model,
                                              rubric.hash):
                summary.skipped += 1
                return
            try:
                messages, parse = await store.read(_request, rubric, subject)
            except LookupError as exc:
                outcome = AnnotationResult(subject, annotator.model, [], [], Usage(), str(exc))
            else:
                labels, raws, usage, error = await ask(annotator, messages, parse,
                                                       completion=completion, tries=tries)
                outcome = AnnotationResult(
                    subject, annotator.model, labels or [], raws, usage, error
                )
            await store.write(_record, outcome, rubric.hash)
            summary.usage.tokens_in += outcome.usage.tokens_in
            summary.usage.tokens_out += outcome.usage.tokens_out
            summary.usage.cost_usd += outcome.usage.cost_usd
            if outcome.error is None:
                summary.done += 1
            else:
                summary.failed += 1
                summary.failures.append(f"{subject.title} by {annotator.model}: "
                                        f"{outcome.error}")
            if on_outcome is not None:
                on_outcome(outcome)

    items: list[subjects.Subject] = []
    for task in tasks:
        items += await store.read(list_subjects, task, experiment_id)
    await asyncio.gather(*(one(s, a) for s in items for a in annotators))
    return summary
