"""Bridges from a running attempt to the store: an observer and a recording grading backend.

:class:`StoreObserver` turns the attempt's turn-by-turn reports (ATIF steps, skills, faults)
into rows and publishes small events. :class:`RecordingBackend` wraps the real grading
backend for one attempt: every evaluation becomes a ``submissions`` row and one
``grading_jobs`` row per try, with up to ``max_tries`` tries when the grader itself fails, so
a grader that dies mid-job is retried and the submission is graded exactly once.
"""

from __future__ import annotations

import re
from typing import Any

from engine.events import EventBus
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.gate import GradingGate
from storage import writes
from storage.store import Store

_ANALYSIS = re.compile(r"(?s)^\s*Analysis:\s*(.*?)(?:\n\s*Plan:\s*(.*))?$")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text") if isinstance(part, dict) else part)
                         for part in content)
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
    """Writes an attempt's reports to SQLite, then publishes an event."""

    def __init__(
        self, store: Store, bus: EventBus, experiment_id: str, attempt_id: int, try_number: int
    ) -> None:
        self.store = store
        self.bus = bus
        self.experiment_id = experiment_id
        self.attempt_id = attempt_id
        self.try_number = try_number
        self._auto_index = 0

    async def step_recorded(self, attempt_id: str, step: dict[str, Any]) -> None:
        index = step.get("step_id")
        if not isinstance(index, int):
            self._auto_index += 1
            index = 100_000 + self._auto_index
        fields = step_fields(step)
        await self.store.write(
            writes.add_step, self.attempt_id, index, try_number=self.try_number, **fields
        )
        self.bus.emit("step_recorded", self.experiment_id, self.attempt_id, step_index=index)

    async def submission_received(self, attempt_id: str, n: int, source: str) -> None:
        self.bus.emit("submission_received", self.experiment_id, self.attempt_id, n=n)

    async def submission_rejected(self, attempt_id: str, reason: str, detail: str) -> None:
        await self.store.write(
            writes.append_event,
            "submission_rejected",
            {"reason": reason, "detail": detail[:2000]},
            experiment_id=self.experiment_id,
            attempt_id=self.attempt_id,
        )
        self.bus.emit("submission_rejected", self.experiment_id, self.attempt_id, reason=reason)

    async def feedback_returned(self, attempt_id: str, n: int, feedback: Feedback) -> None:
        self.bus.emit(
            "feedback_returned", self.experiment_id, self.attempt_id, n=n,
            verdict=feedback.verdict, speedup=feedback.speedup,
        )

    async def skill_updated(self, attempt_id: str, text: str) -> None:
        await self.store.write(writes.add_skill, text, attempt_id=self.attempt_id)
        self.bus.emit("skill_updated", self.experiment_id, self.attempt_id, chars=len(text))

    async def event(self, attempt_id: str, event: dict[str, Any]) -> None:
        kind = str(event.get("kind") or "attempt_event")
        await self.store.write(
            writes.append_event,
            f"attempt.{kind}",
            {**event, "try": self.try_number},
            experiment_id=self.experiment_id,
            attempt_id=self.attempt_id,
        )
        self.bus.emit(f"attempt.{kind}", self.experiment_id, self.attempt_id)

    async def attempt_finished(self, attempt_id: str, outcome: Any) -> None:
        return None  # the scheduler records the outcome with the attempt row


class RecordingBackend:
    """One attempt's view of the grading backend, recording and retrying every evaluation."""

    def __init__(
        self,
        inner: GradingBackend,
        store: Store,
        bus: EventBus,
        *,
        experiment_id: str,
        attempt_id: int,
        try_number: int,
        max_tries: int = 3,
        gate: GradingGate | None = None,
    ) -> None:
        self.inner = inner
        self.gate = gate or GradingGate(1 << 30)  # no limit unless the engine shares one
        self.store = store
        self.bus = bus
        self.experiment_id = experiment_id
        self.attempt_id = attempt_id
        self.try_number = try_number
        self.max_tries = max_tries
        self.name = getattr(inner, "name", "grading")
        self._counters: dict[str, int] = {"submission": 0, "final": 0}
        self._unfinished: dict[tuple[str, str, str], tuple[int, int]] = {}
        self.last_final: Feedback | None = None

    async def grade(self, request: GradeRequest) -> Feedback:
        purpose = request.purpose if request.purpose in self._counters else "submission"
        key = (purpose, request.request_id, writes.text_hash(request.source))
        if key in self._unfinished:
            # the caller retries a grading that ended in an infrastructure error: the same
            # submission gets another grading job, never a second submission row
            n, submission_id = self._unfinished.pop(key)
        else:
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
        feedback = Feedback(verdict="error", reason="crash", message="not graded")
        for _ in range(self.max_tries):
            job_id = await self.store.write(writes.start_grading_job, submission_id, self.name)
            self.bus.emit("grading_started", self.experiment_id, self.attempt_id, n=n,
                          purpose=purpose, waiting=self.gate.waiting)
            try:
                async with self.gate.slot(purpose):
                    feedback = await self.inner.grade(request)
            except Exception as exc:  # noqa: BLE001 - a broken backend is a transient failure
                feedback = Feedback(
                    verdict="error", reason="crash", message=f"{type(exc).__name__}: {exc}"
                )
            await self.store.write(writes.finish_grading_job, job_id, feedback.to_dict())
            self.bus.emit("submission_graded", self.experiment_id, self.attempt_id, n=n,
                          purpose=purpose, verdict=feedback.verdict, speedup=feedback.speedup)
            if feedback.verdict != "error":
                break
        if feedback.verdict == "error":
            self._unfinished[key] = (n, submission_id)
        if purpose == "final":
            self.last_final = feedback
        return feedback

    async def close(self) -> None:
        return None
