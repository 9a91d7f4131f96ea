"""Bridges from a running attempt to the store: an observer and a recording grading backend.

:class:`StoreObserver` turns the attempt's turn-by-turn reports (ATIF steps, skills, faults)
into rows and typed events, each through one :meth:`Publisher.publish`.
:class:`RecordingBackend` wraps the real grading backend for one attempt: every evaluation
becomes a ``submissions`` row and each call one ``grading_jobs`` row; when a grading ends in
an infrastructure error the caller tries again (the retry policy, ``engine/retry.py``) and the
same submission gets another job, so it is graded exactly once.
"""

from __future__ import annotations

import re
from typing import Any

from engine.attempts.observer import ReplyDelta
from engine.attempts.spec import AttemptId
from engine.events import (
    AttemptNote,
    FeedbackReturned,
    GradingDuplicate,
    GradingStarted,
    ModelReplyStreamed,
    Publisher,
    SkillUpdated,
    StepRecorded,
    SubmissionGraded,
    SubmissionReceived,
    SubmissionRejected,
)
from engine.grading.admission import admit
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.backends.gate import GradingGate
from engine.grading.backends.ledger import JOB_KEY, Duplicate
from storage import writes

_ANALYSIS = re.compile(r"(?s)^\s*Analysis:\s*(.*?)(?:\n\s*Plan:\s*(.*))?$")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text(part.get("text") if isinstance(part, dict) else part) for part in content
        )
    return str(content)


def step_fields(step: dict[str, Any]) -> dict[str, Any]:
    """Map one ATIF step (Harbor's trajectory format) onto trajectory_steps columns."""
    message = _text(step.get("message"))
    analysis, plan = "", ""
    m = _ANALYSIS.match(message)
    if m:
        analysis, plan = (m.group(1) or "").strip(), (m.group(2) or "").strip()
    keystrokes = []
    for call in step.get("tool_calls") or []:
        args = call.get("arguments") or {}
        if "keystrokes" in args:
            keystrokes.append(str(args["keystrokes"]))
        elif args:
            keystrokes.append(f"{call.get('function_name', 'call')}: {args}")
    observation = step.get("observation") or {}
    outputs = [_text(r.get("content")) for r in observation.get("results") or []]
    metrics = step.get("metrics") or {}
    return {
        "source": str(step.get("source") or "agent"),
        "analysis": analysis,
        "plan": plan,
        "keystrokes": "".join(keystrokes),
        "terminal_output": "\n".join(o for o in outputs if o),
        "message": message if not m else "",
        "tokens_in": int(metrics.get("prompt_tokens") or 0),
        "tokens_out": int(metrics.get("completion_tokens") or 0),
    }


class StoreObserver:
    """Writes an attempt's reports to SQLite and publishes each as a typed event."""

    def __init__(
        self, publisher: Publisher, experiment_id: str, attempt_id: AttemptId, try_number: int
    ) -> None:
        self.publisher = publisher
        self.experiment_id = experiment_id
        self.attempt_id = attempt_id
        self.try_number = try_number
        self._auto_index = 0

    async def step_recorded(self, attempt_id: AttemptId, step: dict[str, Any]) -> None:
        index = step.get("step_id")
        if not isinstance(index, int):
            self._auto_index += 1
            index = 100_000 + self._auto_index
        await self.publisher.publish(
            StepRecorded(self.experiment_id, self.attempt_id, step_index=index),
            writes.add_step,
            self.attempt_id,
            index,
            try_number=self.try_number,
            **step_fields(step),
        )

    async def reply_streamed(self, attempt_id: AttemptId, delta: ReplyDelta) -> None:
        """A reply's new text, for live readers only (no row: the step is stored)."""
        self.publisher.notify(
            ModelReplyStreamed(
                self.experiment_id,
                self.attempt_id,
                try_number=self.try_number,
                reply=delta.reply,
                offset=delta.offset,
                text=delta.text,
                done=delta.done,
            )
        )

    async def submission_received(self, attempt_id: AttemptId, n: int, source: str) -> None:
        await self.publisher.publish(SubmissionReceived(self.experiment_id, self.attempt_id, n=n))

    async def submission_rejected(self, attempt_id: AttemptId, reason: str, detail: str) -> None:
        await self.publisher.publish(
            SubmissionRejected(
                self.experiment_id, self.attempt_id, reason=reason, detail=detail[:2000]
            )
        )

    async def feedback_returned(self, attempt_id: AttemptId, n: int, feedback: Feedback) -> None:
        await self.publisher.publish(
            FeedbackReturned(
                self.experiment_id,
                self.attempt_id,
                n=n,
                verdict=feedback.verdict,
                speedup=feedback.speedup,
            )
        )

    async def skill_updated(self, attempt_id: AttemptId, text: str) -> None:
        await self.publisher.publish(
            SkillUpdated(self.experiment_id, self.attempt_id, chars=len(text)),
            writes.add_skill,
            text,
            attempt_id=self.attempt_id,
        )

    async def event(self, attempt_id: AttemptId, event: dict[str, Any]) -> None:
        name = str(event.get("kind") or "attempt_event")
        await self.publisher.publish(
            AttemptNote(
                self.experiment_id,
                self.attempt_id,
                name=name,
                report={**event, "try": self.try_number},
            )
        )

    async def attempt_finished(self, attempt_id: AttemptId, outcome: Any) -> None:
        return None  # the scheduler records the outcome with the attempt row


def _duplicate_hook(backend: Any) -> Any:
    """The ``attach_duplicate_sink`` of ``backend`` or of a backend it wraps (``.inner``)."""
    for _ in range(8):
        if backend is None:
            return None
        attach = getattr(backend, "attach_duplicate_sink", None)
        if attach is not None:
            return attach
        backend = getattr(backend, "inner", None)
    return None


class RecordingBackend:
    """One attempt's view of the grading backend: each call is one recorded grading job."""

    def __init__(
        self,
        inner: GradingBackend,
        publisher: Publisher,
        *,
        experiment_id: str,
        attempt_id: AttemptId,
        try_number: int,
        gate: GradingGate | None = None,
    ) -> None:
        self.inner = inner
        self.gate = gate or GradingGate(1 << 30)  # no limit unless the engine shares one
        self.publisher = publisher
        self.store = publisher.store
        self.experiment_id = experiment_id
        self.attempt_id = attempt_id
        self.try_number = try_number
        self.name = getattr(inner, "name", "grading")
        self._counters: dict[str, int] = {"submission": 0, "final": 0}
        self._unfinished: dict[tuple[str, str, str], tuple[int, int]] = {}
        self.last_final: Feedback | None = None
        attach = _duplicate_hook(inner)
        if attach is not None:  # a backend that may run a job twice (ray) reports duplicates
            attach(self._record_duplicate)

    async def _submission(self, purpose: str, request: GradeRequest) -> tuple[int, int]:
        """(n, submission id): a new submission row, or the one whose grading failed before
        (the caller retries an infrastructure error: another job, never a second row)."""
        key = (purpose, request.request_id, writes.text_hash(request.source))
        if key in self._unfinished:
            return self._unfinished.pop(key)
        self._counters[purpose] += 1
        n = self._counters[purpose]
        submission_id = await self.store.write(
            writes.add_submission,
            self.attempt_id,
            n,
            request.source,
            purpose=purpose,
            try_number=self.try_number,
        )
        return n, submission_id

    def resume_submission(self, request: GradeRequest, n: int, submission_id: int) -> None:
        """Grade ``request`` as the stored submission ``submission_id`` (number ``n``): each
        try a new job of that submission, no new row (an operator's re-grade of a final)."""
        purpose = request.purpose if request.purpose in self._counters else "submission"
        key = (purpose, request.request_id, writes.text_hash(request.source))
        self._unfinished[key] = (n, submission_id)

    async def grade(self, request: GradeRequest) -> Feedback:
        purpose = request.purpose if request.purpose in self._counters else "submission"
        n, submission_id = await self._submission(purpose, request)
        job_id = await self.store.write(writes.start_grading_job, submission_id, self.name)
        await self.publisher.publish(
            GradingStarted(
                self.experiment_id, self.attempt_id, n=n, purpose=purpose, waiting=self.gate.waiting
            )
        )
        try:
            async with self.gate.slot(purpose):
                job_key = JOB_KEY.set(str(job_id))  # the job's id keys the backend's ledger
                try:
                    feedback = await self.inner.grade(request)
                finally:
                    JOB_KEY.reset(job_key)
        except Exception as exc:  # noqa: BLE001 - a broken backend is an infrastructure error
            feedback = Feedback(
                verdict="error", reason="crash", message=f"{type(exc).__name__}: {exc}"
            )
        feedback = admit(feedback)  # stored as the engine believes it (no invalid timings)
        await self.publisher.publish(
            SubmissionGraded(
                self.experiment_id,
                self.attempt_id,
                n=n,
                purpose=purpose,
                verdict=feedback.verdict,
                speedup=feedback.speedup,
            ),
            writes.finish_grading_job,
            job_id,
            feedback.to_dict(),
        )
        if feedback.verdict == "error":
            key = (purpose, request.request_id, writes.text_hash(request.source))
            self._unfinished[key] = (n, submission_id)
        if purpose == "final":
            self.last_final = feedback
        return feedback

    async def _record_duplicate(self, duplicate: Duplicate) -> None:
        """A second result for a job already graded: on record (an event row), then dropped."""
        await self.publisher.publish(
            GradingDuplicate(
                self.experiment_id,
                job_id=duplicate.key,
                dispatch=duplicate.dispatch,
                kept_dispatch=duplicate.delivered_dispatch,
                worker=duplicate.worker,
                verdict=duplicate.verdict,
            )
        )

    async def close(self) -> None:
        return None
