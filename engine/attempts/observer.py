"""What an attempt reports while it runs, and a simple in-memory observer for tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.attempts.spec import AttemptId
from engine.grading.api import Feedback


@dataclass(frozen=True)
class ReplyDelta:
    """Text a streamed model reply gained since the last report (throttled).

    ``reply`` numbers the model calls of one execution try (1, 2, ...); ``offset`` is how many
    characters of that reply came before ``text``; ``done`` marks the last report of a reply
    (its step is recorded later, after the agent ran the reply's commands).
    """

    reply: int
    offset: int
    text: str
    done: bool = False


class AttemptObserver(Protocol):
    """Receives an attempt's events as they happen (the lead's SQLite writer implements it).

    ``step`` is one ATIF step as a JSON dict (analysis/plan in ``message``, keystrokes in
    ``tool_calls``, terminal output in ``observation``, tokens in ``metrics``). ``event`` is a
    lifecycle or fault record: ``{"kind": ..., "try": n, "message": ..., ...}``.
    ``reply_streamed`` reports a model reply as it streams (live only: the finished reply
    arrives again as a step).
    """

    async def step_recorded(self, attempt_id: AttemptId, step: dict[str, Any]) -> None: ...

    async def reply_streamed(self, attempt_id: AttemptId, delta: ReplyDelta) -> None: ...

    async def submission_received(self, attempt_id: AttemptId, n: int, source: str) -> None: ...

    async def submission_rejected(
        self, attempt_id: AttemptId, reason: str, detail: str
    ) -> None: ...

    async def feedback_returned(
        self, attempt_id: AttemptId, n: int, feedback: Feedback
    ) -> None: ...

    async def skill_updated(self, attempt_id: AttemptId, text: str) -> None: ...

    async def event(self, attempt_id: AttemptId, event: dict[str, Any]) -> None: ...

    async def attempt_finished(self, attempt_id: AttemptId, outcome: Any) -> None: ...


@dataclass
class MemoryObserver:
    """Keeps every event in lists; good for tests and debugging."""

    steps: list[tuple[AttemptId, dict[str, Any]]] = field(default_factory=list)
    replies: list[tuple[AttemptId, ReplyDelta]] = field(default_factory=list)
    submissions: list[tuple[AttemptId, int, str]] = field(default_factory=list)
    rejections: list[tuple[AttemptId, str, str]] = field(default_factory=list)
    feedback: list[tuple[AttemptId, int, Feedback]] = field(default_factory=list)
    skills: list[tuple[AttemptId, str]] = field(default_factory=list)
    events: list[tuple[AttemptId, dict[str, Any]]] = field(default_factory=list)
    outcomes: list[tuple[AttemptId, Any]] = field(default_factory=list)

    async def step_recorded(self, attempt_id: AttemptId, step: dict[str, Any]) -> None:
        self.steps.append((attempt_id, step))

    async def reply_streamed(self, attempt_id: AttemptId, delta: ReplyDelta) -> None:
        self.replies.append((attempt_id, delta))

    async def submission_received(self, attempt_id: AttemptId, n: int, source: str) -> None:
        self.submissions.append((attempt_id, n, source))

    async def submission_rejected(self, attempt_id: AttemptId, reason: str, detail: str) -> None:
        self.rejections.append((attempt_id, reason, detail))

    async def feedback_returned(self, attempt_id: AttemptId, n: int, feedback: Feedback) -> None:
        self.feedback.append((attempt_id, n, feedback))

    async def skill_updated(self, attempt_id: AttemptId, text: str) -> None:
        self.skills.append((attempt_id, text))

    async def event(self, attempt_id: AttemptId, event: dict[str, Any]) -> None:
        self.events.append((attempt_id, event))

    async def attempt_finished(self, attempt_id: AttemptId, outcome: Any) -> None:
        self.outcomes.append((attempt_id, outcome))

    def event_kinds(self) -> list[str]:
        return [e["kind"] for _, e in self.events]
