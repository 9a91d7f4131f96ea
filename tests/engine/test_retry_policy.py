"""The one retry policy: infrastructure errors only, max_tries in all, asked by every part."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest
from engine.retry import RetryPolicy


@dataclass
class Flaky:
    """A grader that fails ``errors`` times (alternately raising and answering "error")."""

    errors: int
    verdict: str = "preview"
    calls: int = 0

    async def grade(self, request: GradeRequest) -> Feedback:
        self.calls += 1
        if self.calls <= self.errors:
            if self.calls % 2:
                raise ConnectionResetError("worker died")
            return Feedback(verdict="error", reason="crash", message="lost")
        return Feedback(verdict=self.verdict, impl_median_ms=1.0)  # a pass carries its time

    async def close(self) -> None:
        return None


@dataclass
class Notes:
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, note: dict[str, Any]) -> None:
        self.seen.append(note)


REQUEST = GradeRequest("p28", "cute", "def solve(): pass\n", request_id="r1")


async def test_grading_errors_are_retried_up_to_max_tries_and_recorded() -> None:
    notes = Notes()
    grader = Flaky(errors=2)
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST, notes)
    assert feedback.verdict == "preview" and grader.calls == 3
    assert [n["try"] for n in notes.seen] == [1, 2]
    assert all(n["kind"] == "grading_retry" for n in notes.seen)
    assert "ConnectionResetError" in notes.seen[0]["message"]


async def test_grading_gives_up_after_max_tries_with_the_last_error() -> None:
    notes = Notes()
    grader = Flaky(errors=10)
    feedback = await RetryPolicy(max_tries=2).grade(grader, REQUEST, notes)
    assert feedback.verdict == "error" and grader.calls == 2 and len(notes.seen) == 1


async def test_a_verdict_about_the_work_is_never_retried() -> None:
    grader = Flaky(errors=0, verdict="fail")
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST)
    assert feedback.verdict == "fail" and grader.calls == 1


def test_execution_retries_only_transient_unstopped_tries_within_the_limit() -> None:
    policy = RetryPolicy(max_tries=3)
    assert list(policy.execution_tries()) == [1, 2, 3]
    assert policy.retry_execution(1, transient=True, stopped=False)
    assert not policy.retry_execution(3, transient=True, stopped=False)
    assert not policy.retry_execution(1, transient=False, stopped=False)
    assert not policy.retry_execution(1, transient=True, stopped=True)


def test_scheduler_reruns_and_resumes_by_the_same_numbers() -> None:
    policy = RetryPolicy(max_tries=3, rerun_failed=True)
    assert policy.rerun_now("failed", retryable=True, try_number=2)
    assert not policy.rerun_now("failed", retryable=True, try_number=3)
    assert not policy.rerun_now("failed", retryable=False, try_number=1)  # runner retried
    assert not policy.rerun_now("finished", retryable=True, try_number=1)
    assert policy.resume("interrupted", 2) and not policy.resume("interrupted", 3)
    assert policy.resume("failed", 1)
    assert not RetryPolicy(max_tries=3, rerun_failed=False).resume("failed", 1)
    assert not RetryPolicy(max_tries=3, rerun_failed=False).rerun_now(
        "failed", retryable=True, try_number=1
    )
    with pytest.raises(ValueError):
        policy.resume("finished", 0)


def test_the_retry_table_feeds_the_policy() -> None:
    config = parse_config(
        '[experiment]\nname = "r"\nproblems = ["p28"]\n[[models]]\n'
        'name = "sim/a"\n[retry]\nmax_tries = 5\nrerun_failed = false\n'
    )
    assert RetryPolicy.from_config(config) == RetryPolicy(max_tries=5, rerun_failed=False)
